package dispatch

import (
	"fmt"
	"slices"
	"strings"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/record"
)

// maxAncestors bounds the parent links followed (records are input: a
// cycle or an absurd chain must not keep admission busy).
const maxAncestors = 64

// nestedDeadlock refuses a start that was not admitted and never can be
// while it waits, because what is in its way are runs it was started from
// (admission.Deadlock). It runs inside the admission lock, on the active
// set read there, so it sees exactly what the decision saw.
func (d *Dispatcher) nestedDeadlock(set *activeSet, cfg record.Config, u admission.Usage, c admission.Candidate, req AdmitRequest) error {
	if req.Parent == "" {
		return nil
	}
	in := admission.Deadlock(cfg, u, c, d.ancestors(set, req.Parent))
	if len(in) == 0 {
		return nil
	}
	e := &NestedDeadlockError{Task: req.Task, Ancestors: in, InUse: u.InUse, Maximum: cfg.MaximumInProgress}
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
func (d *Dispatcher) ancestors(set *activeSet, parent record.RunID) []record.RunID {
	var out []record.RunID
	for id := parent; id != "" && len(out) < maxAncestors && !slices.Contains(out, id); {
		out = append(out, id)
		id = d.parentOf(set, id)
	}
	return out
}

// parentOf is an active run's parent, read from its record (a run counted
// from the active index has only what admission needs in memory).
func (d *Dispatcher) parentOf(set *activeSet, id record.RunID) record.RunID {
	for _, e := range set.entries {
		if e.ID != id || e.Rec == nil || e.Finished {
			continue
		}
		if !e.Indexed {
			return e.Rec.Parent
		}
		if rec, err := d.Store.ReadActive(id); err == nil {
			return rec.Parent
		}
	}
	return ""
}

// NestedDeadlockError is a start refused because it could only wait for
// runs that are its own ancestors: a command run by crew calling crew
// start for a slot its own run holds. Nothing was recorded.
type NestedDeadlockError struct {
	Task string
	// Ancestors are the runs in the way, nearest first (the first is the
	// run in CREW_RUN_ID when it is one of them).
	Ancestors []admission.Holder
	// SameTask: the task's own active run is an ancestor.
	SameTask       bool
	InUse, Maximum int
	// Pool is set when the start's pool, full of ancestors, is the barrier.
	Pool               string
	PoolInUse, PoolMax int
}

func (e *NestedDeadlockError) Error() string {
	var b strings.Builder
	b.WriteString("not admitted: it would wait forever for ")
	switch {
	case e.SameTask:
		fmt.Fprintf(&b, "its own task's active run, which is the run it was started from: ")
	case e.Pool != "":
		fmt.Fprintf(&b, "pool %q (%d/%d in use), all held by runs it was started from: ", e.Pool, e.PoolInUse, e.PoolMax)
	default:
		fmt.Fprintf(&b, "a slot (%d/%d in use), all held by runs it was started from: ", e.InUse, e.Maximum)
	}
	for i, h := range e.Ancestors {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "task %q (run %s, %s since %s)", h.Task, h.RunID, h.State, h.Since.Local().Format("15:04:05"))
	}
	b.WriteString("; they cannot end while this start, run from their commands (CREW_RUN_ID), waits for them. ")
	switch {
	case e.SameTask:
		b.WriteString("Give the nested start a task of its own, or run the command without crew start")
	case e.Pool != "":
		fmt.Fprintf(&b, "Raise the pool's cap (crew init --pool %s=%d), or run the command without crew start", e.Pool, e.PoolMax+1)
	default:
		fmt.Fprintf(&b, "Raise the cap (crew init --max %d), or run the command without crew start", e.Maximum+1)
	}
	return b.String()
}
