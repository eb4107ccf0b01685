package dispatch

import (
	"time"

	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/recovery"
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
	_, _ = d.PruneLazily()
}

// PruneLazily is RunFinished's prune; see recovery.LazyPrune.
func (d *Dispatcher) PruneLazily() (recovery.LazyReport, error) {
	cfg, _, err := d.Local.LoadConfig()
	if err != nil || cfg.KeepsEverything() {
		return recovery.LazyReport{}, err
	}
	return recovery.LazyPrune(d.Local, recovery.PolicyOf(cfg), d.now(), recovery.DefaultLazyLimits)
}

// PruneConfigured is `crew prune` without flags: the configured retention,
// applied in full.
func (d *Dispatcher) PruneConfigured(dryRun bool) (*recovery.PruneReport, error) {
	cfg, _, err := d.Local.LoadConfig()
	if err != nil {
		return nil, err
	}
	if cfg.KeepsEverything() {
		return nil, &vocab.UsageError{Err: &vocab.NoRetentionError{Path: d.Local.ConfigPath()}}
	}
	return d.Prune(recovery.PruneOptions{Policy: recovery.PolicyOf(cfg), DryRun: dryRun})
}

// OpenLog reads a run's log as its command wrote it, capped or not (the
// run's record says), while it is written and after.
func (d *Dispatcher) OpenLog(id record.RunID) *runlog.Reader {
	var logMax int64
	if rec, err := d.Local.ReadRun(id); err == nil {
		logMax = rec.LogMax
	}
	return d.Local.Logs().NewLogReader(id, logMax)
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
