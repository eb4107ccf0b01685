package dispatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/runstore"
)

// NotFoundError is a RUN|TASK argument that names nothing in the state
// root.
type NotFoundError struct{ Msg string }

func (e *NotFoundError) Error() string { return e.Msg }

// Resolve turns a RUN|TASK argument into a run id: a run id as given (a
// run, or a waiting start's ticket); a task name means the task's active
// run, else its oldest waiting start, else its latest finished run.
func (d *Dispatcher) Resolve(arg string) (runstore.RunID, error) {
	st := d.Store
	if runstore.LooksLikeRunID(arg) {
		id := runstore.RunID(arg)
		if _, err := st.ReadRun(id); err == nil {
			return id, nil
		}
		if _, err := os.Stat(st.TicketPath(id)); err == nil {
			return id, nil
		}
		return "", &NotFoundError{Msg: fmt.Sprintf("no run %s in the state root %s", arg, st.Root)}
	}
	if err := runstore.ValidateTask(arg); err != nil {
		return "", &UsageError{Msg: "invalid task name: " + err.Error()}
	}
	entries, err := st.ListActive()
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Rec != nil && !e.Finished && e.Rec.Task == arg {
			return e.ID, nil
		}
	}
	for _, t := range liveTickets(d.scanQueue(false)) {
		if t.task == arg {
			return t.id, nil
		}
	}
	recent, _, err := st.RecentFinished(1, func(r *runstore.Record) bool { return r.Task == arg })
	if err != nil {
		return "", err
	}
	if len(recent) == 1 {
		return recent[0].RunID, nil
	}
	return "", &NotFoundError{Msg: fmt.Sprintf("task %q has no runs in the state root %s", arg, st.Root)}
}

// ErrWaitTimeout is a wait that ran out of time.
var ErrWaitTimeout = errors.New("timed out")

// WaitRun blocks until the run has a final record and returns it. A run
// whose processes are all gone without finalizing it is finalized here (as
// interrupted), so waiting on a crashed run ends with the truth instead of
// hanging. A waiting start's ticket is waited on until it becomes a run.
func (d *Dispatcher) WaitRun(ctx context.Context, id runstore.RunID) (*runstore.Record, error) {
	st := d.Store
	for delay := time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		rec, err := st.ReadRun(id)
		switch {
		case err == nil && !rec.State.Active():
			return rec, nil
		case err == nil:
			if held, _ := lockfs.Probe(st.OwnerLockPath(id)); !held {
				if _, _, err := d.finalizeDead(id); err != nil {
					return nil, err
				}
				continue
			}
		case errors.Is(err, os.ErrNotExist):
			if _, terr := os.Stat(st.TicketPath(id)); terr != nil {
				// Neither a run nor a waiting start: it may be between the
				// two (admitted a moment ago); look once more.
				if rec, err := st.ReadRun(id); err == nil {
					if !rec.State.Active() {
						return rec, nil
					}
					continue
				}
				if held, _ := lockfs.Probe(st.TicketLockPath(id)); !held {
					return nil, &NotFoundError{Msg: fmt.Sprintf("run %s left the queue without being admitted", id)}
				}
			}
		default:
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ErrWaitTimeout
		case <-time.After(delay):
		}
	}
}

// RunExitCode is the exit code `crew wait` reports for a final record:
// the command's own, 125 for a run whose exit status is unknown.
func RunExitCode(rec *runstore.Record) int {
	if rec.ExitCode != nil {
		return *rec.ExitCode
	}
	return 125
}
