package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// WaitRun blocks until the run has a final record and no longer holds its
// slot, and returns the record. A run whose processes are all gone without
// finalizing it is finalized here (as interrupted), so waiting on a crashed
// run ends with the truth instead of hanging. A waiting start's ticket is
// waited on until it becomes a run.
//
// From the first look at which the run has a log, the wait holds it
// (runlog.HoldLog), so no prune removes the run before the wait has read
// its final record. A run pruned before that (it ran and ended between two
// looks) is answered from the index of finished runs; a run that is gone
// from there too is a RunGoneError.
func (d *Dispatcher) WaitRun(ctx context.Context, id record.RunID) (*record.Run, error) {
	w := &runWait{d: d, id: id}
	defer func() {
		if w.hold != nil {
			w.hold.Release()
		}
	}()
	for delay := time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		if rec, err := w.look(); rec != nil || err != nil {
			return rec, err
		}
		failpoint.Hit(failpoint.WaitPoll)
		select {
		case <-ctx.Done():
			return nil, vocab.ErrWaitTimeout
		case <-time.After(delay):
		}
	}
}

// runWait is one WaitRun.
type runWait struct {
	d    *Dispatcher
	id   record.RunID
	hold backend.LogHold
	// saw: the wait has seen the run's record (not only its ticket).
	saw bool
}

// look looks at the run once: its final record once it is over, nothing
// while it is not.
func (w *runWait) look() (*record.Run, error) {
	runs := w.d.runs()
	w.holdLog()
	rec, err := runs.ReadRun(w.id)
	switch {
	case err == nil && !rec.State.Active() && !w.d.stillCounted(w.id, rec):
		return rec, nil
	case err == nil && !rec.State.Active():
		// Its supervisor is between the final record and leaving the
		// active set: a start now could still count the run.
		w.saw = true
	case err == nil:
		w.saw = true
		if runs.OwnerState(w.id, rec.Locks).Owner == record.Dead {
			if _, _, err := runs.FinalizeDead(w.id, w.d.now()); err != nil {
				return nil, err
			}
		}
	case errors.Is(err, fs.ErrNotExist):
		return w.missing()
	default:
		return nil, err
	}
	return nil, nil
}

// holdLog takes hold of the run's log once it exists, and again if the
// one held is no longer the run's log (a planted one, moved aside).
func (w *runWait) holdLog() {
	if w.hold != nil && w.hold.Current() {
		return
	}
	if w.hold != nil {
		w.hold.Release()
	}
	w.hold, _ = w.d.history().HoldLog(w.id) // none yet: look again next time
}

// missing is a look that found no record: a waiting start, a run between
// the two (admitted a moment ago), or one that is gone.
func (w *runWait) missing() (*record.Run, error) {
	if q := w.d.queue(); q.HasTicket(w.id) {
		// A waiter leaves its ticket before it lets go of its lock: a
		// ticket still there after its lock was found free was left by
		// a waiter that died (a background waiter killed, say).
		if q.WaiterState(w.id) == record.Dead && q.HasTicket(w.id) {
			return nil, fmt.Errorf("run %s never ran: %s", w.id, diedInLine)
		}
		return nil, nil
	}
	if rec, err := w.d.runs().ReadRun(w.id); err == nil {
		w.saw = true
		if !rec.State.Active() && !w.d.stillCounted(w.id, rec) {
			return rec, nil
		}
		return nil, nil // a run now: look again after the delay
	}
	if !w.saw && w.d.queue().WaiterState(w.id) != record.Dead {
		return nil, nil // its waiter lives: between its ticket and its record
	}
	if end, ok := w.d.history().IndexedEndOf(w.id); ok {
		return prunedRun(w.id, end), nil
	}
	if w.saw {
		return nil, &vocab.RunGoneError{ID: w.id}
	}
	return nil, &vocab.NotFoundError{Err: fmt.Errorf("run %s left the queue without being admitted (or ran, and was removed before crew could see it)", w.id)}
}

// prunedRun is a run whose record was removed before a waiter read it, as
// the index of finished runs tells its end.
func prunedRun(id record.RunID, end backend.IndexedEnd) *record.Run {
	fin := end.Finished
	return &record.Run{Version: record.RecordVersion, RunID: id, Task: end.Task, State: end.State, ExitCode: end.Exit,
		FinishedAt: &fin, Events: []record.Event{},
		Reason: "its record was removed (pruned) before crew could read it; the index of finished runs tells how it ended"}
}

// stillCounted reports whether a run with a final record may still be
// counted as holding its slot: admission takes a run it knows from the
// active index as alive while the kernel shows both of its locks held, so
// until its supervisor has left the active set (or is gone), "crew wait
// RUN && crew start TASK" could be refused for RUN's own slot.
func (d *Dispatcher) stillCounted(id record.RunID, final *record.Run) bool {
	if _, err := d.runs().ReadActive(id); errors.Is(err, fs.ErrNotExist) {
		return false
	}
	return d.runs().OwnerState(id, final.Locks).Supervisor == record.Alive
}
