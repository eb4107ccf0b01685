// Package recovery finalizes runs whose owners are gone and cleans up what
// crashes and finished runs leave behind: the fenced finalization every
// process uses for a run it does not own (admission reaping dead runs,
// crew recover, crew wait, crew stop), crew recover itself, and crew prune.
package recovery

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

// FinalizeDead finalizes a run whose owner is gone, and returns its final
// record. The run's fence makes it safe against the run's own processes
// and against every other finalizer: no run is finalized twice and no live
// run at all. The record is re-read under the fence because it may have
// changed since it was listed.
func FinalizeDead(st *runstore.Store, id record.RunID, now time.Time) (backend.ReapOutcome, *record.Run, error) {
	return finalizeFenced(st, id, func(rec *record.Run) { rec.EndDead(now, record.OwnerExited, st.Logs().HasLog(id)) })
}

// FinalizeStopped records a run whose supervisor was already gone, and
// whose command crew stop has just seen end, as stopped by req.
func FinalizeStopped(st *runstore.Store, id record.RunID, req *record.StopRequest, now time.Time) (backend.ReapOutcome, *record.Run, error) {
	return finalizeFenced(st, id, func(rec *record.Run) { rec.EndStopped(now, req) })
}

// finalizeFenced takes the run's fence, re-reads its record and, if it is
// still active, makes it final with end; a run already final is only
// cleaned up.
func finalizeFenced(st *runstore.Store, id record.RunID, end func(*record.Run)) (backend.ReapOutcome, *record.Run, error) {
	// The record names the run's lock files, so the fence can tell them
	// from replacements; it is read again under the fence.
	var want *record.LockIDs
	if rec, err := st.ReadActive(id); err == nil {
		want = rec.Locks
	}
	locks, err := st.Fence(id, want)
	switch {
	case errors.Is(err, runstore.ErrRunBusy):
		return backend.OwnerBusy, nil, nil
	case errors.Is(err, runstore.ErrRunDone):
		return backend.AlreadyDone, nil, nil
	case err != nil:
		return 0, nil, fmt.Errorf("run %s: %w", id, err)
	}
	failpoint.Hit(failpoint.RecoverLocked)

	outcome := backend.Reaped
	rec, err := st.ReadDone(id)
	switch {
	case err == nil:
		outcome = backend.LeftoverRemoved
	case !errors.Is(err, os.ErrNotExist):
		locks.Release()
		return 0, nil, err
	default:
		rec, err = st.ReadActive(id)
		if errors.Is(err, os.ErrNotExist) {
			locks.Release()
			return backend.AlreadyDone, nil, nil
		}
		if err != nil {
			locks.Release()
			return 0, nil, err
		}
		if rec.State.Active() {
			endTruthfully(locks, rec, end)
		} else {
			outcome = backend.LeftoverRemoved // a final record whose move was cut short
		}
	}
	if err := locks.Finish(rec); err != nil {
		locks.Release()
		return 0, nil, err
	}
	return outcome, rec, nil
}

// endTruthfully makes an active record final: from the outcome its
// supervisor kept, if there is one, else with end.
func endTruthfully(locks *runstore.RunLocks, rec *record.Run, end func(*record.Run)) {
	ended, note := endFromKeptOutcome(locks, rec)
	if ended {
		return
	}
	end(rec)
	if note != "" {
		rec.Reason += "; " + note
		rec.AddEvent(time.Now().UTC(), "%s", note)
	}
}
