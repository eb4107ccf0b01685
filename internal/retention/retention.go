// Package retention is the rule of which finished runs crew keeps (crew
// init --retain, --retain-for; crew prune --keep, --older-than): one rule,
// which every store's prune and lazy prune apply.
package retention

import (
	"errors"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// Policy says which finished runs to keep; a run is removable only when
// every rule that is set lets it go (so with both, a run is kept if
// either keeps it). Both go by when runs finished, not by when they were
// created (a run that waited in line was created when it joined it):
//
//   - KeepNewest N keeps the N runs that finished last: a run goes only
//     once N finished runs ended after it. (So a run is never removed the
//     moment it ends, nor while crew wait is about to read it, and a long
//     run that ended after N shorter ones is kept.) Negative: no rule by
//     count. Zero keeps none.
//   - OlderThan D keeps runs that finished less than D ago. Negative: no
//     rule by age. Zero keeps none.
//
// With neither rule set, nothing is removable.
type Policy struct {
	KeepNewest int
	OlderThan  time.Duration
}

// NoCountRule and NoAgeRule are KeepNewest's and OlderThan's values for
// "no rule by count", "no rule by age".
const (
	NoCountRule = -1
	NoAgeRule   = -1
)

// PolicyOf is the retention a config asks for (crew init --retain,
// --retain-for).
func PolicyOf(cfg record.Config) Policy {
	p := Policy{KeepNewest: NoCountRule, OlderThan: NoAgeRule}
	if cfg.Retain > 0 {
		p.KeepNewest = cfg.Retain
	}
	if cfg.RetainFor > 0 {
		p.OlderThan = cfg.RetainFor
	}
	return p
}

// KeepsEverything reports whether the policy removes nothing.
func (p Policy) KeepsEverything() bool { return p.KeepNewest < 0 && p.OlderThan < 0 }

// Lets applies the policy to a run that finished at fin: whether it may
// be removed now. byCount says whether the count rule lets it go (N runs
// finished after it). Every store prunes by this rule, and only by it.
func (p Policy) Lets(fin time.Time, byCount bool, now time.Time) bool {
	switch {
	case p.KeepsEverything():
		return false
	case p.KeepNewest >= 0 && !byCount:
		return false
	case p.OlderThan >= 0 && now.Sub(fin) < p.OlderThan:
		return false
	}
	return true
}

// Run is a finished run as a prune sees it.
type Run struct {
	ID       record.RunID
	Task     string
	Finished time.Time
	Path     string // where its record is, for the report
}

// ErrHeld is a finished run that must not be removed yet.
var ErrHeld = errors.New("held by a waiter or an unfinished finalization")

// Finished is what a full prune needs of a store's finished runs.
type Finished interface {
	// ByFinish lists every finished run, latest finish first (ties:
	// newest id first); records that cannot be read are problems, left
	// alone.
	ByFinish() (runs []Run, problems []string, err error)
	// Remove removes a finished run's record (and its log, on this host),
	// and says how many bytes they took; dry only says. A run that must
	// be kept is an error satisfying errors.Is(err, ErrHeld).
	Remove(id record.RunID, dry bool) (bytes int64, err error)
	// AfterPrune tidies what the removals leave behind.
	AfterPrune(removed []record.RunID)
}

// Prune removes the finished runs p lets go (crew prune), newest kept
// first: the count rule counts the runs that finished after each, as
// ByFinish orders them.
func Prune(h Finished, p Policy, now time.Time, dry bool) (*vocab.PruneReport, error) {
	rep := &vocab.PruneReport{Version: vocab.PruneVersion, DryRun: dry, Removed: []vocab.PrunedRun{}, Errors: []string{}}
	if p.KeepsEverything() {
		return rep, nil
	}
	runs, problems, err := h.ByFinish()
	if err != nil {
		return nil, err
	}
	rep.Errors = append(rep.Errors, problems...)
	var removed []record.RunID
	for i, r := range runs {
		if !p.Lets(r.Finished, p.KeepNewest >= 0 && i >= p.KeepNewest, now) {
			rep.Kept++
			continue
		}
		size, err := h.Remove(r.ID, dry)
		switch {
		case errors.Is(err, ErrHeld):
			rep.Kept++
			continue
		case err != nil:
			rep.Errors = append(rep.Errors, err.Error())
			continue
		}
		fin := r.Finished
		rep.Removed = append(rep.Removed, vocab.PrunedRun{RunID: r.ID, Task: r.Task, FinishedAt: &fin, Path: r.Path, Bytes: size})
		removed = append(removed, r.ID)
	}
	if !dry {
		h.AfterPrune(removed)
	}
	return rep, nil
}
