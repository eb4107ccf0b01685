package dispatch

import (
	"fmt"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/record"
)

// UsageError is a bad argument; nothing was changed.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// NotFoundError is a RUN|TASK argument that names nothing in the state
// root.
type NotFoundError struct{ Err error }

func (e *NotFoundError) Error() string { return e.Err.Error() }
func (e *NotFoundError) Unwrap() error { return e.Err }

// RefusalKind says why a run was not admitted.
type RefusalKind int

const (
	// SlotsBusy: every slot (or its pool's) is held by a living run, or
	// older waiting starts are owed the free ones.
	SlotsBusy RefusalKind = iota + 1
	// TaskActive: the task already has a living active run, or an older
	// waiting start.
	TaskActive
)

// RefusedError is a run that was not admitted; nothing was recorded.
type RefusedError struct {
	Kind    RefusalKind
	Task    string
	InUse   int
	Maximum int
	Holders []admission.Holder // for TaskActive, the task's run; for SlotsBusy, the runs holding slots
	// OlderTicket is an older waiting start of the same task (TaskActive).
	OlderTicket record.RunID
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
	Warnings []error
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

// NotPermittedError is a stop that would take another user's rights: the
// run or waiting start belongs to a user other than the one asking, who is
// not root. Nothing was signalled or changed.
type NotPermittedError struct{ Err error }

func (e *NotPermittedError) Error() string { return e.Err.Error() }
func (e *NotPermittedError) Unwrap() error { return e.Err }
