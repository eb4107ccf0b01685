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

// WaitRun blocks until the run has a final record and returns it. A run
// whose processes are all gone without finalizing it is finalized here (as
// interrupted), so waiting on a crashed run ends with the truth instead of
// hanging. A waiting start's ticket is waited on until it becomes a run.
func (d *Dispatcher) WaitRun(ctx context.Context, id record.RunID) (*record.Run, error) {
	st := d.Store
	for delay := time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		rec, err := st.ReadRun(id)
		switch {
		case err == nil && !rec.State.Active():
			return rec, nil
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
					if !rec.State.Active() {
						return rec, nil
					}
					continue
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
