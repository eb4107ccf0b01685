package recovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/finishindex"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// Reindex makes the index of finished runs agree with the finished records,
// after the runs above were finalized (each of which indexed itself): it
// is derived, so anything wrong with it is repaired, never reported as a
// problem of the runs.
func Reindex(st *runstore.Store, o backend.UpkeepOptions) []vocab.RecoverItem {
	if time.Now().After(o.Deadline) {
		return []vocab.RecoverItem{{Path: st.FinishIndex().IndexPath(), Outcome: vocab.FailedItem, Reason: fmt.Sprintf("index of finished runs not reached within --timeout %s", o.Timeout)}}
	}
	dry := o.DryRun
	rep, err := st.FinishIndex().CheckIndex(dry)
	item := vocab.RecoverItem{Path: st.FinishIndex().IndexPath(), Outcome: vocab.Indexed}
	would := ""
	if dry {
		would = "would "
	}
	switch {
	case err != nil:
		item.Outcome, item.Reason = vocab.FailedItem, err.Error()
	case rep.Rebuilt:
		item.Reason = fmt.Sprintf("%sbuild the index of finished runs anew from their records (%s)", would, rep.Why)
		if !dry {
			item.Reason = fmt.Sprintf("built the index of finished runs anew from their records, %d runs (%s)", rep.Runs, rep.Why)
		}
	case rep.Added+rep.Changed+rep.Junk > 0:
		item.Reason = indexChanges(rep, dry)
	default:
		return nil
	}
	return []vocab.RecoverItem{item}
}

// indexChanges says what CheckIndex did (or, dry, would do) to a usable
// index.
func indexChanges(rep *finishindex.IndexRepair, dry bool) string {
	did := func(verb, past string) string {
		if dry {
			return "would " + verb
		}
		return past
	}
	var what []string
	if rep.Junk > 0 {
		what = append(what, fmt.Sprintf("%s %d line(s) that were not entries from the index of finished runs", did("drop", "dropped"), rep.Junk))
	}
	if rep.Added+rep.Changed > 0 {
		s := fmt.Sprintf("%s %d finished run(s) that the index of finished runs lacked (written by an older crew, copied in, or lost to a power cut) and %d whose record changed after it was indexed",
			did("index", "indexed"), rep.Added, rep.Changed)
		if rep.Unreadable > 0 {
			s += fmt.Sprintf(" (%d of them cannot be read: status and history list them as problems)", rep.Unreadable)
		}
		what = append(what, s)
	}
	return strings.Join(what, "; ")
}

// Quarantine moves an unreadable active file aside: a file whose name is
// no run id at once (no run can hold it), a run's record under the run's
// fence (a run someone holds is left alone: OwnerBusy). It says where the
// file went.
func Quarantine(st *runstore.Store, e backend.ActiveEntry, now time.Time, host string) (backend.ReapOutcome, string, error) {
	if e.ID == "" {
		dest, err := st.QuarantineActive(e.Name, e.Err.Error(), now, host)
		return backend.Reaped, dest, err
	}
	locks, err := st.Fence(e.ID, nil) // unreadable: its record names no lock files
	switch {
	case errors.Is(err, runstore.ErrRunBusy):
		return backend.OwnerBusy, "", nil
	case errors.Is(err, runstore.ErrRunDone):
		return backend.AlreadyDone, "", nil
	case err != nil:
		return 0, "", err
	}
	if !st.ActiveFileExists(e.Name) {
		// Finalized by someone else since it was listed.
		locks.Release()
		return backend.AlreadyDone, "", nil
	}
	dest, err := st.QuarantineActive(e.Name, e.Err.Error(), now, host)
	if err != nil {
		locks.Release()
		return 0, "", err
	}
	if err := locks.Withdraw(); err != nil {
		return 0, "", fmt.Errorf("moved to %s, but: %w", dest, err)
	}
	return backend.Reaped, dest, nil
}

// Sweep removes what crashes left outside run records: lock files with no
// record, temporary files of interrupted atomic writes, dead waiters'
// tickets, logs of runs that no longer exist. It runs under the admission
// lock, so no reservation is half-made while it looks.
func Sweep(st *runstore.Store, o backend.UpkeepOptions) []vocab.RecoverItem {
	dry := o.DryRun
	fail := func(reason string) []vocab.RecoverItem {
		return []vocab.RecoverItem{{Path: st.Root(), Outcome: vocab.FailedItem, Reason: reason}}
	}
	var adm *runstore.Admission
	if !dry {
		remaining := time.Until(o.Deadline)
		if remaining <= 0 {
			return fail(fmt.Sprintf("leftover sweep not reached within --timeout %s", o.Timeout))
		}
		var err error
		adm, err = st.LockAdmission(context.Background(), remaining)
		if err != nil {
			return fail("leftover sweep not done: " + err.Error())
		}
		defer adm.Release()
	}
	leftovers, err := st.Leftovers()
	if err != nil {
		return fail(err.Error())
	}
	var items []vocab.RecoverItem
	for _, l := range leftovers {
		item := vocab.RecoverItem{RunID: string(l.ID), Task: l.Task, Path: l.Path, Outcome: vocab.Cleaned, Reason: leftoverReason(l.Kind)}
		if dry {
			item.Reason = "would remove: " + item.Reason
			items = append(items, item)
			continue
		}
		removed, err := adm.RemoveLeftover(l)
		if err != nil {
			item.Outcome, item.Reason = vocab.FailedItem, err.Error()
		}
		if removed || err != nil {
			items = append(items, item)
		}
	}
	return items
}

func leftoverReason(k runstore.LeftoverKind) string {
	switch k {
	case runstore.LeftoverLock:
		return "lock file with no active run (left by a crash before the run's record was written, or after it was finalized)"
	case runstore.LeftoverTemp:
		return "temporary file of an interrupted atomic write"
	case runstore.LeftoverTicket:
		return "queue ticket of a waiting start that died"
	case runstore.LeftoverQueueLock:
		return "queue lock with no ticket (a waiting start killed while joining or leaving the queue)"
	case runstore.LeftoverLog:
		return "log of a run that has no record (a prune cut short)"
	case runstore.LeftoverStop:
		return "stop request of a run that is no longer active (crew stop asked as it ended)"
	}
	return "leftover"
}
