package runstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
)

// upgradeRoot makes the state root's format the one this crew writes
// (record.ConfigVersion) before its first reservation writes a slot
// file: crew.json is rewritten at version 2 (or written, if the root has
// none), durably. A crew of version 1 refuses such a crew.json, so it
// never admits runs beside slot files it cannot see. It runs inside the
// admission lock (Reserve), so no admission of this crew or an older one
// reads crew.json half-changed; once per process.
func (s *Store) upgradeRoot() error {
	if s.upgraded.Load() {
		return nil
	}
	root, err := s.openRoot()
	if err != nil {
		return err
	}
	data, err := rootfs.ReadFile(root, configName, MaxConfigBytes)
	var cfg record.Config
	switch {
	case errors.Is(err, fs.ErrNotExist):
		cfg = record.DefaultConfig()
	case err != nil:
		return fmt.Errorf("read %s to upgrade the state root: %w", s.display(configName), unwrapPath(err))
	default:
		if s.noteVersion(data) {
			return nil
		}
		if cfg, err = record.DecodeConfig(data); err != nil {
			return fmt.Errorf("upgrade the state root: config %s: %w", s.display(configName), err)
		}
	}
	b, err := cfg.Encode()
	if err == nil {
		err = failpoint.Error(failpoint.UpgradeWrite)
	}
	if err == nil {
		err = s.replaceFile(".", root, configName, b, durable)
	}
	if err != nil {
		return fmt.Errorf("upgrade the state root: write %s: %w", s.display(configName), unwrapPath(err))
	}
	s.upgraded.Store(true)
	return nil
}

// noteVersion notes that crew.json (data, as read) is at the version this
// crew writes, so that the next reservation of this process need not read
// it again; it reports whether it is. (Nothing converts a root back: a
// crew of version 1 refuses it.)
func (s *Store) noteVersion(data []byte) bool {
	var peek struct {
		Version int `json:"version"`
	}
	if json.Unmarshal(data, &peek) != nil || peek.Version != record.ConfigVersion {
		return false
	}
	s.upgraded.Store(true)
	return true
}
