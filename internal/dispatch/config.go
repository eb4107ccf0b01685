package dispatch

import (
	"context"
	"time"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/runstore"
)

// InitResult says what Init found and wrote.
type InitResult struct {
	Path    string
	Existed bool // a readable crew.json was there before
	Old     int  // its maximumInProgress, if it existed
	New     int
}

// Init creates the state root and writes crew.json. With setMax it sets the
// cap (repairing an unreadable config); without, it keeps what is there.
// The write happens under the admission lock, so no admission reads a
// config in the middle of a change and recovery can tell crew.json's
// temporary files from live ones.
func (d *Dispatcher) Init(maxInProgress int, setMax bool, lockTimeout time.Duration) (*InitResult, error) {
	st := d.Store
	if err := st.Ensure(); err != nil {
		return nil, err
	}
	lock, err := lockfs.AcquireAdmission(context.Background(), st.AdmissionLockPath(), st.AdmissionHolderPath(), lockTimeout)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	cfg, exists, err := runstore.LoadConfig(st.Layout)
	if err != nil && !setMax {
		return nil, err // nothing to put in its place
	}
	res := &InitResult{Path: st.ConfigPath(), Existed: exists && err == nil, Old: cfg.MaximumInProgress}
	if setMax {
		cfg = runstore.Config{Version: runstore.ConfigVersion, MaximumInProgress: maxInProgress}
	}
	res.New = cfg.MaximumInProgress
	if !res.Existed || setMax {
		if err := runstore.SaveConfig(st.Layout, cfg); err != nil {
			return nil, err
		}
	}
	return res, nil
}
