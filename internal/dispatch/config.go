package dispatch

import (
	"context"
	"fmt"
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
	Pools   map[string]int // the pools now configured
}

// PoolChange sets a pool's cap; a cap of 0 removes the pool.
type PoolChange struct {
	Name string
	Max  int
}

// Init creates the state root and writes crew.json. With setMax it sets the
// cap (repairing an unreadable config); without, it keeps what is there.
// The write happens under the admission lock, so no admission reads a
// config in the middle of a change and recovery can tell crew.json's
// temporary files from live ones.
func (d *Dispatcher) Init(maxInProgress int, setMax bool, pools []PoolChange, lockTimeout time.Duration) (*InitResult, error) {
	if setMax && maxInProgress < 1 {
		return nil, &UsageError{Msg: fmt.Sprintf("maximumInProgress must be at least 1, not %d", maxInProgress)}
	}
	for _, p := range pools {
		if err := runstore.ValidatePoolName(p.Name); err != nil {
			return nil, &UsageError{Msg: err.Error()}
		}
		if p.Max < 0 {
			return nil, &UsageError{Msg: fmt.Sprintf("pool %q: cap must be at least 1 (or 0 to remove the pool), not %d", p.Name, p.Max)}
		}
	}
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
	if err != nil {
		cfg = runstore.DefaultConfig() // repairing: start from scratch
	}
	res := &InitResult{Path: st.ConfigPath(), Existed: exists && err == nil, Old: cfg.MaximumInProgress}
	if setMax {
		cfg.MaximumInProgress = maxInProgress
	}
	if len(pools) > 0 {
		next := map[string]int{}
		for name, n := range cfg.Pools {
			next[name] = n
		}
		for _, p := range pools {
			if p.Max == 0 {
				delete(next, p.Name)
			} else {
				next[p.Name] = p.Max
			}
		}
		cfg.Pools = next
		if len(next) == 0 {
			cfg.Pools = nil
		}
	}
	res.New = cfg.MaximumInProgress
	res.Pools = cfg.Pools
	if !res.Existed || setMax || len(pools) > 0 {
		if err := runstore.SaveConfig(st.Layout, cfg); err != nil {
			return nil, err
		}
	}
	lock.Release()
	d.RingWaiters() // a raised cap may let waiters in
	return res, nil
}
