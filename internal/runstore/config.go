package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
)

// MaxConfigBytes bounds crew.json.
const MaxConfigBytes = 64 << 10

// ConfigError is a crew.json that cannot be used; it names the file and,
// for a file that is not valid config, the line and column, as compilers
// do: PATH:LINE:COL: message.
type ConfigError struct {
	Path string
	Err  error
}

func (e *ConfigError) Error() string {
	msg := e.Message()
	if e.Unreadable() {
		return msg
	}
	return msg + "; fix it, or rewrite it with `crew init --max N` (which moves this file aside)"
}

// Message is the error without the hint: PATH:LINE:COL: message, or
// PATH: message where the place is not known.
func (e *ConfigError) Message() string {
	var syn *record.SyntaxError
	if errors.As(e.Err, &syn) && syn.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %v", e.Path, syn.Line, syn.Col, syn.Err)
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}

// Place is the 1-based line and column the error is at; zero if unknown.
func (e *ConfigError) Place() (line, col int) {
	var syn *record.SyntaxError
	if errors.As(e.Err, &syn) {
		return syn.Line, syn.Col
	}
	return 0, 0
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
