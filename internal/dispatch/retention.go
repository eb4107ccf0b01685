package dispatch

import (
	"errors"
	"io/fs"
	"time"

	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/retention"
	"github.com/crew-dev/crew/internal/runlog"
	"github.com/crew-dev/crew/internal/vocab"
)

// CheckChanges validates config changes the way crew init does, for
// every backend.
func CheckChanges(changes ...vocab.ConfigChange) error {
	var probe record.Config
	for _, c := range changes {
		c(&probe)
	}
	return checkChange(probe)
}

func checkChange(c record.Config) error {
	switch {
	case c.Retain < 0:
		return vocab.Usagef("--retain must be at least 1 (or 0 to keep any number of finished runs), not %d", c.Retain)
	case c.RetainFor < 0:
		return vocab.Usagef("--retain-for must be positive (or 0 to keep finished runs of any age), not %s", c.RetainFor)
	case c.LogMax < 0:
		return vocab.Usagef("--log-max must not be negative")
	case c.LogMax > 0 && c.LogMax < record.MinLogMax:
		return vocab.Usagef("--log-max must be at least 64KiB (or 0 for no cap), not %d bytes", c.LogMax)
	}
	return nil
}

// logMaxFor is the cap of a new run's log: the start's own, else the
// config's.
func logMaxFor(req vocab.AdmitRequest, cfg record.Config) int64 {
	switch {
	case req.LogMax > 0:
		return req.LogMax
	case req.LogMax < 0:
		return 0
	}
	return cfg.LogMax
}

// RunFinished is what a supervisor does once its run is final and its
// slot free: ring the waiters the slot may go to, then prune a few
// finished runs the configured retention lets go (lazily: a bounded
// amount of work, outside every lock, so no finish pays for a backlog).
// Errors are ignored: the next finish, or crew prune, tries again.
func (d *Dispatcher) RunFinished() {
	d.RingWaiters()
	_ = d.Admin().PruneLazily()
}

// PruneLazily is RunFinished's prune: the store's bounded, oldest-first
// prune by the configured retention.
func (m Admin) PruneLazily() error {
	d := m.d
	cfg, _, err := d.Store.LoadConfig()
	if err != nil || cfg.KeepsEverything() {
		return err
	}
	return d.history().PruneLazily(retention.PolicyOf(cfg), d.now())
}

// PruneOptions select finished runs to remove: those Policy lets go (crew
// prune --keep N --older-than D, or the configured retention).
type PruneOptions struct {
	Policy retention.Policy
	DryRun bool
}

// PruneConfigured is `crew prune` without flags: the configured retention,
// applied in full.
func (m Admin) PruneConfigured(dryRun bool) (*vocab.PruneReport, error) {
	d := m.d
	cfg, _, err := d.Store.LoadConfig()
	if err != nil {
		return nil, err
	}
	if cfg.KeepsEverything() {
		return nil, &vocab.UsageError{Err: &vocab.NoRetentionError{Path: d.Store.ConfigPath()}}
	}
	return m.Prune(PruneOptions{Policy: retention.PolicyOf(cfg), DryRun: dryRun})
}

// Prune is `crew prune`: it removes the finished runs (records and logs)
// the policy lets go, newest kept first. It only ever touches finished
// runs, so it is safe while starts and recoveries run; a run a crew wait
// holds is kept.
func (m Admin) Prune(opts PruneOptions) (*vocab.PruneReport, error) {
	d := m.d
	return retention.Prune(d.history(), opts.Policy, d.now(), opts.DryRun)
}

// OpenLog reads a run's log as its command wrote it, capped or not (the
// run's record says), while it is written and after.
func (d *Dispatcher) OpenLog(id record.RunID) *runlog.Reader {
	var logMax int64
	if rec, err := d.runs().ReadRun(id); err == nil {
		logMax = rec.LogMax
	}
	return d.Logs.Logs().NewLogReader(id, logMax)
}

// RetentionOf is cfg's retention as status shows it, for every backend.
func RetentionOf(cfg record.Config) vocab.RetentionView { return retentionView(cfg) }

func retentionView(cfg record.Config) vocab.RetentionView {
	v := vocab.RetentionView{Retain: cfg.Retain}
	if cfg.RetainFor > 0 {
		v.RetainFor = duration.Format(cfg.RetainFor)
		v.RetainForSeconds = int64(cfg.RetainFor / time.Second)
	}
	return v
}

// LogHere checks that run id's log can be read on this host: on a store
// shared by hosts, a run's log is where its supervisor ran (a
// *vocab.RemoteLogError names the host); on a state root, it is here.
func (d *Dispatcher) LogHere(id record.RunID) error {
	if d.Logs == nil {
		return errors.New("no local state root to keep logs in: set CREW_ROOT, XDG_STATE_HOME or HOME")
	}
	if _, ok := d.stateRoot(); ok {
		return nil
	}
	rec, err := d.runs().ReadRun(id)
	switch {
	case errors.Is(err, fs.ErrNotExist) && d.queue().HasTicket(id):
		return nil // waiting: its log will be made where it runs
	case err != nil:
		return err
	case rec.Host != d.Host:
		return &vocab.RemoteLogError{RunID: id, Host: rec.Host}
	}
	return nil
}
