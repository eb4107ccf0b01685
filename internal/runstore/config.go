package runstore

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
)

// MaxConfigBytes bounds crew.json.
const MaxConfigBytes = 64 << 10

// ConfigError is a crew.json that cannot be used; it names the file and,
// for a file that is not valid config, the line and column.
type ConfigError struct {
	Path string
	Err  error
}

func (e *ConfigError) Error() string {
	if e.Unreadable() {
		return fmt.Sprintf("config %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("config %s: %v; fix it, or rewrite it with `crew init --max N`", e.Path, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// Unreadable reports whether the file could not be read at all (as
// opposed to read and found invalid), so that rewriting it is no fix.
func (e *ConfigError) Unreadable() bool {
	var tooLarge *rootfs.TooLargeError
	var notRegular *rootfs.NotRegularError
	return errors.Is(e.Err, fs.ErrPermission) || errors.As(e.Err, &tooLarge) || errors.As(e.Err, &notRegular) ||
		!isDecodeError(e.Err)
}

// decodeError marks errors that come from the config's content.
type decodeError struct{ err error }

func (e decodeError) Error() string { return e.err.Error() }
func (e decodeError) Unwrap() error { return e.err }

func isDecodeError(err error) bool {
	var d decodeError
	return errors.As(err, &d)
}

// LoadConfig reads crew.json. A missing file (or state root) yields the
// defaults and exists=false; an unusable one is a *ConfigError.
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
		return record.Config{}, false, &ConfigError{Path: path, Err: err}
	}
	data, err := rootfs.ReadFile(root, configName, MaxConfigBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return record.DefaultConfig(), false, nil
	}
	if err != nil {
		return record.Config{}, true, &ConfigError{Path: path, Err: unwrapPath(err)}
	}
	cfg, err = record.DecodeConfig(data)
	if err != nil {
		return record.Config{}, true, &ConfigError{Path: path, Err: decodeError{err}}
	}
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
