package dispatch

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/runstore"
)

// ReapOutcome says what finalizeDead did with one run.
type ReapOutcome int

const (
	// Reaped: the run's owner was gone and its record is now final and out
	// of the active set.
	Reaped ReapOutcome = iota + 1
	// OwnerBusy: someone holds the owner lock (the run lives, or another
	// recoverer is finalizing it); nothing was touched.
	OwnerBusy
	// AlreadyDone: the run was finalized by someone else meanwhile.
	AlreadyDone
)

// finalizeDead finalizes a run whose owner lock is free. Taking the owner
// lock exclusively is the fence: a living owner, or a concurrent
// recoverer, holds it, so no run is finalized twice and no live run is
// finalized at all. The record is re-read under the lock because it may
// have changed since it was listed.
func (d *Dispatcher) finalizeDead(id runstore.RunID) (ReapOutcome, error) {
	st := d.Store
	owner, err := lockfs.TryOwner(st.OwnerLockPath(id))
	switch {
	case errors.Is(err, lockfs.ErrBusy):
		return OwnerBusy, nil
	case errors.Is(err, lockfs.ErrGone):
		// No lock file: either the run was finalized by its owner or a
		// recoverer (then the record is gone from the active set too), or
		// the lock file was lost. A record with no lock file has no owner.
		if _, err := os.Stat(st.ActivePath(id)); errors.Is(err, os.ErrNotExist) {
			return AlreadyDone, nil
		}
		return d.finalizeLocked(id, nil)
	case err != nil:
		return 0, err
	}
	return d.finalizeLocked(id, owner)
}

// finalizeLocked finalizes a dead run while holding its owner lock (or,
// when owner is nil, when no lock file exists to hold).
func (d *Dispatcher) finalizeLocked(id runstore.RunID, owner *lockfs.OwnerLock) (ReapOutcome, error) {
	st := d.Store
	release := func() {
		if owner != nil {
			_ = owner.Release()
		}
	}
	if !st.IsDone(id) {
		rec, err := st.ReadRecord(st.ActivePath(id))
		if errors.Is(err, os.ErrNotExist) {
			release()
			return AlreadyDone, nil
		}
		if err != nil {
			release()
			return 0, err
		}
		if rec.State.Active() {
			markInterrupted(rec, d.now())
		}
		if err := st.WriteDone(rec); err != nil {
			release()
			return 0, err
		}
	}
	if err := st.RemoveActive(id); err != nil {
		release()
		return 0, err
	}
	if err := os.Remove(st.SupervisorLockPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		release()
		return 0, fmt.Errorf("remove supervisor lock of run %s: %w", id, err)
	}
	if owner != nil {
		if err := owner.RemoveAndRelease(); err != nil {
			return 0, err
		}
	}
	return Reaped, nil
}

// markInterrupted turns an active record whose owner died into a final
// one that says what is known and what is not.
func markInterrupted(rec *runstore.Record, now time.Time) {
	since := rec.CreatedAt
	if rec.StartedAt != nil {
		since = *rec.StartedAt
	}
	var what string
	switch rec.State {
	case runstore.Running:
		what = fmt.Sprintf("command pid %d is gone too", rec.TaskPID)
	default:
		what = "the command may have started (its start was not recorded) and is gone if it did"
	}
	rec.Reason = fmt.Sprintf("owner process %d on host %s exited without finalizing the run (killed or crashed); "+
		"state was %s since %s; %s; exit status unknown",
		rec.SupervisorPID, rec.Host, rec.State, since.UTC().Format(time.RFC3339), what)
	rec.State = runstore.Interrupted
	rec.FinishedAt = &now
	rec.ExitCode = nil
}
