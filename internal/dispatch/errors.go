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
}

// RefusedError is a run that was not admitted; nothing was recorded.
type RefusedError struct {
	Kind    RefusalKind
	Task    string
	InUse   int
	Maximum int
	Holders []ActiveRun // for TaskActive, the task's run; for SlotsBusy, the runs holding slots
	// Warnings are problems admission noticed in the active set.
	Warnings []string
}

func (e *RefusedError) Error() string {
	switch e.Kind {
	case TaskActive:
		h := e.Holders[0]
		return fmt.Sprintf("not admitted: task %q is already running as %s (%s since %s)",
			e.Task, h.RunID, h.State, h.Since.Local().Format(time.DateTime))
	default:
		var b strings.Builder
		fmt.Fprintf(&b, "not admitted: all slots are busy (%d/%d in use)", e.InUse, e.Maximum)
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
		b.WriteString("; see `crew status`, or use --force to run past the cap")
		return b.String()
	}
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
