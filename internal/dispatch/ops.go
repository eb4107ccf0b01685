package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/recovery"
)

// ErrWaitTimeout is a wait that ran out of time.
var ErrWaitTimeout = errors.New("timed out")

// WaitRun blocks until the run has a final record and no longer holds its
// slot, and returns the record. A run whose processes are all gone without
// finalizing it is finalized here (as interrupted), so waiting on a crashed
// run ends with the truth instead of hanging. A waiting start's ticket is
// waited on until it becomes a run.
func (d *Dispatcher) WaitRun(ctx context.Context, id record.RunID) (*record.Run, error) {
	st := d.Store
	for delay := time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		rec, err := st.ReadRun(id)
		switch {
		case err == nil && !rec.State.Active() && !d.stillCounted(id, rec):
			return rec, nil
		case err == nil && !rec.State.Active():
			// Its supervisor is between the final record and leaving
			// the active set: a start now could still count the run.
		case err == nil:
			if st.OwnerState(id, rec.Locks).Owner == record.Dead {
				if _, _, err := recovery.FinalizeDead(st, id, d.now()); err != nil {
					return nil, err
				}
				continue
			}
		case errors.Is(err, fs.ErrNotExist):
			if !st.HasTicket(id) {
				// Neither a run nor a waiting start: it may be between the
				// two (admitted a moment ago); look once more.
				if rec, err := st.ReadRun(id); err == nil {
					if !rec.State.Active() && !d.stillCounted(id, rec) {
						return rec, nil
					}
					break // a run now: look again after the delay
				}
				if st.WaiterState(id) == record.Dead {
					return nil, &NotFoundError{Err: fmt.Errorf("run %s left the queue without being admitted", id)}
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

// stillCounted reports whether a run with a final record may still be
// counted as holding its slot: admission takes a run it knows from the
// active index as alive while the kernel shows both of its locks held, so
// until its supervisor has left the active set (or is gone), "crew wait
// RUN && crew start TASK" could be refused for RUN's own slot.
func (d *Dispatcher) stillCounted(id record.RunID, final *record.Run) bool {
	if _, err := d.Store.ReadActive(id); errors.Is(err, fs.ErrNotExist) {
		return false
	}
	return d.Store.OwnerState(id, final.Locks).Supervisor == record.Alive
}
