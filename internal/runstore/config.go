package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
	"github.com/crew-dev/crew/internal/vocab"
)

// MaxConfigBytes bounds crew.json.
const MaxConfigBytes = 64 << 10

// LoadConfig reads crew.json. A missing file (or state root) yields the
// defaults and exists=false; an unusable one is a *vocab.ConfigError.
func (s *Store) LoadConfig() (cfg record.Config, exists bool, err error) {
	path := s.display(configName)
	root, err := s.openRoot()
	if errors.Is(err, ErrNoRoot) {
		return record.DefaultConfig(), false, nil
	}
	var unsafe *UnsafeRootError
	if errors.As(err, &unsafe) {
		return record.Config{}, false, err
	}
	if err != nil {
		return record.Config{}, false, &vocab.ConfigError{Path: path, Err: err, Unreadable: true}
	}
	data, err := rootfs.ReadFile(root, configName, MaxConfigBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return record.DefaultConfig(), false, nil
	}
	if err != nil {
		return record.Config{}, true, &vocab.ConfigError{Path: path, Err: unwrapPath(err), Unreadable: true}
	}
	cfg, err = record.DecodeConfig(data)
	if err != nil {
		return record.Config{}, true, &vocab.ConfigError{Path: path, Err: err}
	}
	s.noteVersion(data)
	return cfg, true, nil
}

// ConfigPath is crew.json's path, for messages.
func (s *Store) ConfigPath() string { return s.display(configName) }

// SaveConfig writes crew.json durably and atomically. It takes the
// admission lock's handle: the config changes only inside the admission
// critical section, so no admission reads it half-changed.
func (a *Admission) SaveConfig(cfg record.Config) error {
	b, err := cfg.Encode()
	if err != nil {
		return err
	}
	root, err := a.s.openRoot()
	if err == nil {
		err = a.s.replaceFile(".", root, configName, b, durable)
	}
	if err != nil {
		return fmt.Errorf("write config %s: %w", a.s.display(configName), unwrapPath(err))
	}
	return nil
}

// MoveConfigAside renames an unusable crew.json to crew.json.broken-<UTC
// time>, so that `crew init` can write a new one without destroying what
// the operator may want back (pools, for one). It returns the new path.
// It takes the admission lock's handle: crew.json changes only inside the
// admission critical section.
func (a *Admission) MoveConfigAside(now time.Time) (string, error) {
	root, err := a.s.openRoot()
	if err != nil {
		return "", fmt.Errorf("move %s aside: %w", a.s.display(configName), err)
	}
	base := configName + ".broken-" + now.UTC().Format("20060102T150405Z")
	name := base
	for n := 2; ; n++ {
		if _, err := root.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			break
		}
		name = fmt.Sprintf("%s-%d", base, n)
	}
	if err := root.Rename(configName, name); err != nil {
		return "", fmt.Errorf("move %s aside to %s: %w", a.s.display(configName), a.s.display(name), unwrapPath(err))
	}
	if err := syncDir(root); err != nil {
		return "", fmt.Errorf("move %s aside: %w", a.s.display(configName), err)
	}
	return a.s.display(name), nil
}
