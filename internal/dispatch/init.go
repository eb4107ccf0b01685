package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// Init creates the state root and writes crew.json. With setMax it sets the
// cap (repairing an unreadable config); without, it keeps what is there.
// The write happens under the admission lock, so no admission reads a
// config in the middle of a change and recovery can tell crew.json's
// temporary files from live ones.
func (m Admin) Init(maxInProgress int, setMax bool, pools []vocab.PoolChange, lockTimeout time.Duration, changes ...vocab.ConfigChange) (*vocab.InitResult, error) {
	d := m.d
	if err := checkInit(maxInProgress, setMax, pools); err != nil {
		return nil, err
	}
	var probe record.Config
	for _, c := range changes {
		c(&probe)
	}
	if err := checkChange(probe); err != nil {
		return nil, err
	}
	st, err := d.Store.Begin(context.Background())
	if err != nil {
		return nil, err
	}
	defer st.Close()
	res, err := untilCommitted(context.Background(), lockTimeout, func(left time.Duration) (*vocab.InitResult, error) {
		return m.initPass(st, left, maxInProgress, setMax, pools, changes)
	})
	if err != nil {
		return nil, err
	}
	d.RingWaiters() // a raised cap may let waiters in
	return res, nil
}

// initPass is Init's pass through the admission critical section, which
// it waits up to timeout to enter.
func (m Admin) initPass(st backend.Starter, timeout time.Duration, maxInProgress int, setMax bool, pools []vocab.PoolChange, changes []vocab.ConfigChange) (*vocab.InitResult, error) {
	d := m.d
	adm, err := st.LockAdmission(context.Background(), timeout)
	if err != nil {
		return nil, err
	}
	defer adm.Release()
	cfg, exists, err := adm.LoadConfig()
	if err != nil && !setMax {
		return nil, err // nothing to put in its place
	}
	res := &vocab.InitResult{Path: d.Store.ConfigPath(), Existed: exists && err == nil, Old: cfg.MaximumInProgress}
	if err != nil {
		// Repairing: keep the broken file, start from scratch.
		if res.Broken, res.MovedAside, err = moveAside(adm, err, d.now()); err != nil {
			return nil, err
		}
		cfg = record.DefaultConfig()
		if sh, ok := d.Store.(sharedStore); ok {
			cfg.Group = sh.SharedGroup() // but a shared root stays shared
		}
	}
	if setMax {
		cfg.MaximumInProgress = maxInProgress
	}
	cfg.Pools = applyPools(cfg.Pools, pools)
	for _, c := range changes {
		c(&cfg)
	}
	res.New, res.Pools, res.Config = cfg.MaximumInProgress, cfg.Pools, cfg
	if !res.Existed || setMax || len(pools) > 0 || len(changes) > 0 {
		if err := adm.SaveConfig(cfg); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// CheckInit validates crew init's cap and pool changes; ApplyPools makes
// the changes to a config's pools. Every backend uses both.
func CheckInit(maxInProgress int, setMax bool, pools []vocab.PoolChange) error {
	return checkInit(maxInProgress, setMax, pools)
}

func ApplyPools(current map[string]int, changes []vocab.PoolChange) map[string]int {
	return applyPools(current, changes)
}

func checkInit(maxInProgress int, setMax bool, pools []vocab.PoolChange) error {
	if setMax && maxInProgress < 1 {
		return vocab.Usagef("maximumInProgress must be at least 1, not %d", maxInProgress)
	}
	for _, p := range pools {
		validate := record.ValidateNewPoolName // a pool added or changed
		if p.Max == 0 {
			validate = record.ValidatePoolName // removing one an older crew accepted
		}
		if err := validate(p.Name); err != nil {
			return &vocab.UsageError{Err: err}
		}
		if p.Max < 0 {
			return vocab.Usagef("pool %q: cap must be at least 1 (or 0 to remove the pool), not %d", p.Name, p.Max)
		}
	}
	return nil
}

// sharedStore is a state root that may be shared with a group (crew init
// --group): a config made anew keeps the group.
type sharedStore interface{ SharedGroup() string }

// moveAside moves an unusable crew.json (loadErr) out of the way of the
// new one, unless there is no file to move (a state root that cannot be
// opened): that error is the caller's.
func moveAside(adm backend.Section, loadErr error, now time.Time) (why, movedTo string, err error) {
	var ce *vocab.ConfigError
	if !errors.As(loadErr, &ce) {
		return "", "", loadErr
	}
	movedTo, err = adm.MoveConfigAside(now)
	return ce.Message(), movedTo, err
}

func applyPools(current map[string]int, changes []vocab.PoolChange) map[string]int {
	if len(changes) == 0 {
		return current
	}
	next := map[string]int{}
	for name, n := range current {
		next[name] = n
	}
	for _, p := range changes {
		if p.Max == 0 {
			delete(next, p.Name)
		} else {
			next[p.Name] = p.Max
		}
	}
	if len(next) == 0 {
		return nil
	}
	return next
}
