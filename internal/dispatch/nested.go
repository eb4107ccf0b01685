package dispatch

import (
	"slices"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// maxAncestors bounds the parent links followed (records are input: a
// cycle or an absurd chain must not keep admission busy).
const maxAncestors = 64

// nestedDeadlock refuses a start that was not admitted and never can be
// while it waits, because what is in its way are runs it was started from
// (admission.Deadlock). It runs inside the admission lock, on the active
// set read there, so it sees exactly what the decision saw.
func (a *admitter) nestedDeadlock(set *activeSet, cfg record.Config, u admission.Usage, c admission.Candidate) error {
	d, req := a.d, a.req
	if req.Parent == "" {
		return nil
	}
	in := admission.Deadlock(cfg, u, c, a.ancestors(set, req.Parent))
	if len(in) == 0 {
		return nil
	}
	e := &vocab.NestedDeadlockError{Task: req.Task, Ancestors: in, InUse: u.InUse, Maximum: cfg.MaximumInProgress}
	switch {
	case in[0].Task == req.Task:
		e.SameTask = true
	case u.InUse < cfg.MaximumInProgress:
		e.Pool, e.PoolInUse, e.PoolMax = req.Pool, u.PoolUse[req.Pool], cfg.Pools[req.Pool]
	}
	for i := range e.Ancestors {
		d.exactHolder(set, &e.Ancestors[i])
	}
	return e
}

// ancestors is the chain of runs a start was started from, nearest first:
// parent, then each one's parent as its record in the active set says.
// A link to a run that is not active ends the chain (a finished run holds
// nothing anyone could wait for).
func (a *admitter) ancestors(set *activeSet, parent record.RunID) []record.RunID {
	var out []record.RunID
	for id := parent; id != "" && len(out) < maxAncestors && !slices.Contains(out, id); {
		out = append(out, id)
		id = a.parentOf(set, id)
	}
	return out
}

// parentOf is an active run's parent, read from its record (a run counted
// from the active index has only what admission needs in memory).
func (a *admitter) parentOf(set *activeSet, id record.RunID) record.RunID {
	d := a.d
	for _, e := range set.entries {
		if e.ID != id || e.Rec == nil || e.Finished {
			continue
		}
		if !e.Indexed {
			return e.Rec.Parent
		}
		if rec, err := d.runs().ReadActive(id); err == nil {
			return rec.Parent
		}
	}
	return ""
}
