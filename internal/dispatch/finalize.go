package dispatch

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/runstore"
)

// ReapOutcome says what finalizeDead did with one run.
type ReapOutcome int

const (
	// Reaped: the run's owner was gone; its record is now final
	// (interrupted) and out of the active set.
	Reaped ReapOutcome = iota + 1
	// LeftoverRemoved: the run had already been finalized; only its active
	// file and lock files were left, and are now removed.
	LeftoverRemoved
	// OwnerBusy: someone holds the run's locks (the run lives, or another
	// process is finalizing it); nothing was touched.
	OwnerBusy
	// AlreadyDone: the run was finalized by someone else meanwhile.
	AlreadyDone
)

var (
	errFenceBusy = errors.New("run is locked by a living process")
	errFenceDone = errors.New("run is no longer active")
)

// fence is what a process holds to change a run it does not own: the
// run's supervisor lock and its owner lock, taken in that order. A living
// supervisor, a living command, or another finalizer holds at least one of
// them, so holding both proves nobody else is working on the run.
type fence struct {
	sup, owner *lockfs.OwnerLock
}

func (d *Dispatcher) takeFence(id runstore.RunID) (*fence, error) {
	st := d.Store
	f := &fence{}
	if failpoint.Skip("fence") {
		return f, nil // test builds only: prove the fence tests can fail
	}
	sup, err := lockfs.TryOwner(st.SupervisorLockPath(id))
	switch {
	case errors.Is(err, lockfs.ErrBusy):
		return nil, errFenceBusy
	case errors.Is(err, lockfs.ErrGone):
		// Removed with its run, or never created (a crash between the two
		// lock files, before any record existed).
	case err != nil:
		return nil, err
	default:
		f.sup = sup
	}
	owner, err := lockfs.TryOwner(st.OwnerLockPath(id))
	switch {
	case errors.Is(err, lockfs.ErrBusy):
		f.release()
		return nil, errFenceBusy
	case errors.Is(err, lockfs.ErrGone):
		// The owner lock file is removed only after the run left the active
		// set. If the record is still there, the file was lost; a fresh one,
		// created exclusively, is the fence for everyone else.
		if _, serr := os.Stat(st.ActivePath(id)); errors.Is(serr, os.ErrNotExist) {
			f.release()
			return nil, errFenceDone
		}
		owner, err = lockfs.CreateOwner(st.OwnerLockPath(id))
		if err != nil {
			f.release()
			if errors.Is(err, os.ErrExist) {
				return nil, errFenceBusy
			}
			return nil, err
		}
	case err != nil:
		f.release()
		return nil, err
	}
	f.owner = owner
	return f, nil
}

func (f *fence) release() {
	if f.owner != nil {
		_ = f.owner.Release()
	}
	if f.sup != nil {
		_ = f.sup.Release()
	}
}

// removeAndRelease deletes the run's lock files, owner lock last, once its
// record is final and out of the active set.
func (f *fence) removeAndRelease(d *Dispatcher, id runstore.RunID) error {
	var errs []error
	if f.sup != nil {
		errs = append(errs, f.sup.RemoveAndRelease())
	} else if err := os.Remove(d.Store.SupervisorLockPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if f.owner != nil {
		errs = append(errs, f.owner.RemoveAndRelease())
	} else if err := os.Remove(d.Store.OwnerLockPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// finalizeDead finalizes a run whose owner is gone, and returns its final
// record. The fence makes it safe against the run's own processes and
// against every other finalizer (admissions and recoverers): no run is
// finalized twice and no live run at all. The record is re-read under the
// fence because it may have changed since it was listed.
func (d *Dispatcher) finalizeDead(id runstore.RunID) (ReapOutcome, *runstore.Record, error) {
	st := d.Store
	f, err := d.takeFence(id)
	switch {
	case errors.Is(err, errFenceBusy):
		return OwnerBusy, nil, nil
	case errors.Is(err, errFenceDone):
		return AlreadyDone, nil, nil
	case err != nil:
		return 0, nil, fmt.Errorf("run %s: %w", id, err)
	}
	failpoint.Hit("recover-locked")

	outcome := Reaped
	rec, err := st.ReadRecord(st.DonePath(id))
	switch {
	case err == nil:
		outcome = LeftoverRemoved
	case !errors.Is(err, os.ErrNotExist):
		f.release()
		return 0, nil, err
	default:
		rec, err = st.ReadRecord(st.ActivePath(id))
		if errors.Is(err, os.ErrNotExist) {
			f.release()
			return AlreadyDone, nil, nil
		}
		if err != nil {
			f.release()
			return 0, nil, err
		}
		if rec.State.Active() {
			_, logErr := os.Stat(st.LogPath(id))
			markInterrupted(rec, d.now(), logErr == nil)
		} else {
			outcome = LeftoverRemoved // a final record whose move was cut short
		}
		if err := st.WriteDone(rec); err != nil {
			f.release()
			return 0, nil, err
		}
	}
	if err := st.RemoveActive(id); err != nil {
		f.release()
		return 0, nil, err
	}
	_ = os.Remove(st.StopRequestPath(id))
	if err := f.removeAndRelease(d, id); err != nil {
		return 0, nil, fmt.Errorf("run %s: %w", id, err)
	}
	return outcome, rec, nil
}

// markInterrupted turns an active record whose owner died into a final
// one that says what is known and what is not.
func markInterrupted(rec *runstore.Record, now time.Time, logExists bool) {
	since := rec.CreatedAt
	if rec.StartedAt != nil {
		since = *rec.StartedAt
	}
	var what string
	switch {
	case rec.State == runstore.Running:
		what = fmt.Sprintf("command pid %d is gone too", rec.TaskPID)
	case !logExists:
		what = "the command was never started"
	default:
		what = "the command may have started (its start was not recorded) and is gone if it did"
	}
	rec.Reason = fmt.Sprintf("owner process %d on host %s exited without finalizing the run (killed or crashed); "+
		"state was %s since %s; %s; exit status unknown",
		rec.SupervisorPID, rec.Host, rec.State, since.UTC().Format(time.RFC3339), what)
	rec.State = runstore.Interrupted
	rec.FinishedAt = &now
	rec.ExitCode = nil
	rec.AddEvent(now, "interrupted: finalized by crew process %d: %s", os.Getpid(), rec.Reason)
}

// idFromTempName extracts the run id from a temporary file name such as
// ".r-...-0123456789abcdef.json123456", if it has one.
func idFromTempName(name string) (runstore.RunID, bool) {
	base := strings.TrimPrefix(name, ".")
	if i := strings.Index(base, ".json"); i > 0 {
		base = base[:i]
	}
	if runstore.LooksLikeRunID(base) {
		return runstore.RunID(base), true
	}
	return "", false
}
