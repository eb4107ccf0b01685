package dispatch

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// RecoverOptions configure crew recover.
type RecoverOptions struct {
	DryRun bool
	// Timeout bounds the whole pass (zero: no bound); what it does not
	// reach is reported as failed.
	Timeout time.Duration
	// Workers finalize dead runs in parallel (on a state root, their
	// fsyncs share journal commits); 0 means a default.
	Workers int
}

// Recover is `crew recover`: it brings every record of the active set to
// the truth (finalizing the runs whose owners are gone, setting aside the
// unreadable ones that hold no slot) and has the store sweep what crashes
// left behind. It is idempotent and safe beside admissions and other
// recovers: every change to a run is fenced against it, by the store. One
// bad item never stops the others.
func (m Admin) Recover(opts RecoverOptions) (*vocab.RecoverReport, error) {
	d := m.d
	rep := &vocab.RecoverReport{Version: vocab.RecoverVersion, DryRun: opts.DryRun, Items: []vocab.RecoverItem{}}
	up, _ := d.Store.(backend.Upkeep)
	deadline := time.Now().Add(opts.Timeout)
	if opts.Timeout <= 0 {
		deadline = time.Now().Add(100 * 365 * 24 * time.Hour) // no limit
	}
	if up != nil {
		if holds, err := up.Prepare(opts.DryRun); err != nil || !holds {
			return rep, err
		}
	}
	entries, err := d.runs().ListActive()
	if err != nil {
		return nil, err
	}
	r := &recoverer{d: d, opts: opts, up: up, deadline: deadline}
	if _, ok := d.procs(); ok {
		r.holders = d.holderPIDs
	}
	rep.Items = append(rep.Items, r.runs(entries)...)
	if up != nil {
		o := backend.UpkeepOptions{DryRun: opts.DryRun, Deadline: deadline, Timeout: opts.Timeout}
		rep.Items = append(rep.Items, up.Sweep(o)...)
		rep.Items = append(rep.Items, up.Reindex(o)...)
	}
	if rep.Count(vocab.Finalized)+rep.Count(vocab.Cleaned) > 0 {
		d.RingWaiters() // finalized runs freed their slots
	}
	return rep, nil
}

// recoverer is one crew recover.
type recoverer struct {
	d        *Dispatcher
	opts     RecoverOptions
	up       backend.Upkeep // nil: the store keeps nothing beside its records
	deadline time.Time
	// holders lists the processes that hold a run's slot, where the
	// system can show them (nil: it cannot).
	holders func(record.RunID) ([]int, error)
}

// runs decides about every entry of the active set, in parallel, and
// returns the items sorted by path.
func (r *recoverer) runs(entries []backend.ActiveEntry) []vocab.RecoverItem {
	workers := cmp.Or(r.opts.Workers, 8)
	results := make([][]vocab.RecoverItem, len(entries))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				e := entries[i]
				if time.Now().After(r.deadline) {
					results[i] = []vocab.RecoverItem{{RunID: string(e.ID), Path: e.Path, Outcome: vocab.FailedItem,
						Reason: fmt.Sprintf("not reached within --timeout %s", r.opts.Timeout)}}
					continue
				}
				results[i] = r.entry(e)
			}
		}()
	}
	for i := range entries {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	var items []vocab.RecoverItem
	for _, res := range results {
		items = append(items, res...)
	}
	slices.SortStableFunc(items, func(a, b vocab.RecoverItem) int { return cmp.Compare(a.Path, b.Path) })
	return items
}

// entry decides about one entry of the active set.
func (r *recoverer) entry(e backend.ActiveEntry) []vocab.RecoverItem {
	item := vocab.RecoverItem{RunID: string(e.ID), Path: e.Path}
	if e.Rec != nil {
		item.Task = e.Rec.Task
	}
	one := func(o vocab.RecoverOutcome, reason string) []vocab.RecoverItem {
		item.Outcome, item.Reason = o, reason
		return []vocab.RecoverItem{item}
	}
	dry := r.opts.DryRun
	if e.ID == "" {
		if dry {
			return one(vocab.Quarantined, fmt.Sprintf("would move to quarantine: %v", e.Err))
		}
		return r.quarantine(item, e)
	}
	owner := r.d.runs().OwnerState(e.ID, lockIDs(e.Rec))
	switch {
	case owner.Err != nil:
		return one(vocab.FailedItem, fmt.Sprintf("cannot tell whether its owner lives: %v", owner.Err))
	case e.Finished && owner.Owner == record.Alive:
		return one(vocab.Alive, "already finished; its supervisor is completing the finalization")
	case e.Finished && dry:
		return one(vocab.Cleaned, "would remove the leftover active file of a finished run")
	case e.Finished:
		return r.finalize(item, e.ID)
	case e.Err != nil && owner.Owner == record.Alive:
		return one(vocab.Alive, fmt.Sprintf("%v; its owner is alive, so it is left in place and counts as holding a slot", e.Err))
	case e.Err != nil && dry:
		return one(vocab.Quarantined, fmt.Sprintf("would move to quarantine: %v", e.Err))
	case e.Err != nil:
		return r.quarantine(item, e)
	case owner.Owner == record.Alive && owner.Supervisor == record.Alive:
		return one(vocab.Alive, "")
	case owner.Owner == record.Alive:
		return []vocab.RecoverItem{r.orphan(item, e.Rec)}
	case dry:
		return one(vocab.Finalized, "would finalize as interrupted: its owner is gone")
	}
	return r.finalize(item, e.ID)
}

// lockIDs are the lock files rec names, if rec could be read.
func lockIDs(rec *record.Run) *record.LockIDs {
	if rec == nil {
		return nil
	}
	return rec.Locks
}

// orphan reports a run whose supervisor is gone while its command still
// runs, naming the processes shown to hold its slot where the kernel can
// show them (the record has no command pid if the supervisor died before
// recording the start).
func (r *recoverer) orphan(item vocab.RecoverItem, rec *record.Run) vocab.RecoverItem {
	cmd := "the command (its start was not recorded)"
	if rec.TaskPID != 0 {
		cmd = fmt.Sprintf("command pid %d (process group %d)", rec.TaskPID, rec.PGID)
	}
	held := ""
	var pids []int
	var err error
	if r.holders != nil {
		pids, err = r.holders(rec.RunID)
	}
	switch {
	case r.holders == nil:
	case err != nil:
		item.HoldersUnknown = err.Error()
		held = fmt.Sprintf(" (which processes hold it, crew cannot tell: %v)", err)
	case len(pids) == 1:
		item.HolderPIDs = pids
		held = fmt.Sprintf(" (pid %d holds it)", pids[0])
	case len(pids) > 1:
		item.HolderPIDs = pids
		held = fmt.Sprintf(" (pids %s hold it)", joinPIDs(pids))
	default:
		held = " (crew can see no process holding it: another user's?)"
	}
	item.Outcome = vocab.Orphaned
	if end := rec.CommandEnded; end != nil {
		item.Reason = fmt.Sprintf("%s at %s, but processes it left still hold the slot%s; left running (stop them with crew stop, or let them finish: the run is final then)",
			end.Describe(), end.At.UTC().Format(time.RFC3339), held)
		return item
	}
	item.Reason = fmt.Sprintf("supervisor process %d on host %s is gone, but %s still runs and holds the slot%s; left running (stop it, or let it finish, then run crew recover again)",
		rec.SupervisorPID, rec.Host, cmd, held)
	return item
}

func joinPIDs(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

// finalize finalizes a dead run and reports what happened.
func (r *recoverer) finalize(item vocab.RecoverItem, id record.RunID) []vocab.RecoverItem {
	outcome, rec, err := r.d.runs().FinalizeDead(id, r.d.now())
	if err != nil {
		item.Outcome, item.Reason = vocab.FailedItem, err.Error()
		return []vocab.RecoverItem{item}
	}
	switch outcome {
	case backend.Reaped:
		item.Outcome, item.Reason = vocab.Finalized, rec.Reason
	case backend.LeftoverRemoved:
		item.Outcome = vocab.Cleaned
		item.Reason = fmt.Sprintf("run had already finished (%s); removed its leftover active file and locks", rec.State)
	case backend.OwnerBusy:
		// Someone took the run after we looked: it is theirs.
		item.Outcome, item.Reason = vocab.Alive, "locked by another process (its command, or another recovery) while being examined; left alone"
	case backend.AlreadyDone:
		return nil
	}
	return []vocab.RecoverItem{item}
}

// quarantine sets an unreadable record aside, through the store.
func (r *recoverer) quarantine(item vocab.RecoverItem, e backend.ActiveEntry) []vocab.RecoverItem {
	if r.up == nil {
		item.Outcome, item.Reason = vocab.FailedItem, fmt.Sprintf("%v; %s cannot set it aside", e.Err, r.d.Store.Where())
		return []vocab.RecoverItem{item}
	}
	outcome, dest, err := r.up.Quarantine(e, r.d.now(), r.d.Host)
	switch {
	case err != nil:
		item.Outcome, item.Reason = vocab.FailedItem, err.Error()
	case outcome == backend.OwnerBusy:
		item.Outcome, item.Reason = vocab.Alive, "locked by a living process while being examined; left alone"
	case outcome == backend.AlreadyDone:
		return nil
	default:
		item.Outcome, item.Reason = vocab.Quarantined, fmt.Sprintf("%v; moved to %s", e.Err, dest)
	}
	return []vocab.RecoverItem{item}
}
