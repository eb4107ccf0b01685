// Package dispatch decides admissions, launches and supervises commands,
// reports status and finalizes runs whose owners died.
package dispatch

import (
	"fmt"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/runstore"
)

// RefusalKind says why a run was not admitted.
type RefusalKind int

const (
	// SlotsBusy: every slot is held by a living run.
	SlotsBusy RefusalKind = iota + 1
	// TaskActive: the task already has a living active run.
	TaskActive
)

// ActiveRun names a run that stands in the way of an admission.
type ActiveRun struct {
	RunID runstore.RunID
	Task  string
	State runstore.State
	Since time.Time
	PID   int
	Pool  string
}

// RefusedError is a run that was not admitted; nothing was recorded.
type RefusedError struct {
	Kind    RefusalKind
	Task    string
	InUse   int
	Maximum int
	Holders []ActiveRun // for TaskActive, the task's run; for SlotsBusy, the runs holding slots
	// OlderTicket is an older waiting start of the same task (TaskActive).
	OlderTicket runstore.RunID
	// Pool, with PoolFull, says the run's pool was the cap that was hit.
	Pool               string
	PoolInUse, PoolMax int
	PoolFull           bool
	// QueueAhead: a slot was free, but older waiting starts get it first.
	QueueAhead bool
	Ahead      int
	// WaitedFor is set when a waiting start gave up (--wait=D).
	WaitedFor time.Duration
	// Warnings are problems admission noticed in the active set.
	Warnings []string
}

func (e *RefusedError) Error() string {
	var b strings.Builder
	b.WriteString("not admitted: ")
	if e.WaitedFor > 0 {
		fmt.Fprintf(&b, "gave up after waiting %s in the queue; ", e.WaitedFor)
	}
	switch {
	case e.Kind == TaskActive && len(e.Holders) > 0:
		h := e.Holders[0]
		fmt.Fprintf(&b, "task %q is already running as %s (%s since %s)",
			e.Task, h.RunID, h.State, h.Since.Local().Format(time.DateTime))
		return b.String()
	case e.Kind == TaskActive:
		fmt.Fprintf(&b, "an older waiting start of task %q (%s) goes first", e.Task, e.OlderTicket)
		return b.String()
	case e.QueueAhead:
		fmt.Fprintf(&b, "%d waiting start(s) are ahead in the queue for the free slot(s) (%d/%d in use); use --wait to line up", e.Ahead, e.InUse, e.Maximum)
		return b.String()
	case e.PoolFull:
		fmt.Fprintf(&b, "pool %q is full (%d/%d in use; all slots %d/%d)", e.Pool, e.PoolInUse, e.PoolMax, e.InUse, e.Maximum)
	default:
		fmt.Fprintf(&b, "all slots are busy (%d/%d in use)", e.InUse, e.Maximum)
	}
	for i, h := range e.Holders {
		if i == 3 {
			fmt.Fprintf(&b, ", and %d more", len(e.Holders)-i)
			break
		}
		sep := ": "
		if i > 0 {
			sep = ", "
		}
		fmt.Fprintf(&b, "%s%q (%s)", sep, h.Task, h.RunID)
	}
	if e.WaitedFor == 0 {
		b.WriteString("; see `crew status`, wait with --wait, or use --force to run past the cap")
	}
	return b.String()
}

// UsageError is a bad argument; nothing was changed.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// LaunchError is a command that could not be started; the run is recorded
// as failed with Reason.
type LaunchError struct {
	RunID  runstore.RunID
	Code   int // 126 not executable, 127 not found
	Reason string
}

func (e *LaunchError) Error() string { return e.Reason }
