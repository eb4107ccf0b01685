package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/finishindex"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

// ReportVersion is the version of the `crew recover --json` schema.
const ReportVersion = 1

// Outcome is what recovery did (or, with --dry-run, would do) with one item.
type Outcome string

const (
	Finalized   Outcome = "finalized"   // owner gone: recorded as interrupted, out of the active set
	Orphaned    Outcome = "orphaned"    // supervisor gone, command still running: left running
	Alive       Outcome = "alive"       // someone still works on it: skipped
	Quarantined Outcome = "quarantined" // unreadable record moved to quarantine/
	Cleaned     Outcome = "cleaned"     // leftover file of a crash removed
	Indexed     Outcome = "indexed"     // the index of finished runs built anew, or completed
	FailedItem  Outcome = "failed"      // could not be handled (or not reached in time)
)

// Item is one line of the recovery report.
type Item struct {
	RunID   string  `json:"runId"`
	Task    string  `json:"task"`
	Path    string  `json:"path"`
	Outcome Outcome `json:"outcome"`
	Reason  string  `json:"reason"`
	// HolderPIDs, for an orphan, are the processes shown holding its
	// owner lock (Options.Holders); HoldersUnknown says why they could
	// not be listed.
	HolderPIDs     []int  `json:"holderPids,omitempty"`
	HoldersUnknown string `json:"holderPidsUnknown,omitempty"`
}

// Report is `crew recover`'s result.
type Report struct {
	Version int    `json:"version"`
	DryRun  bool   `json:"dryRun"`
	Items   []Item `json:"items"`
}

// Count returns how many items had outcome o.
func (r *Report) Count(o Outcome) int {
	n := 0
	for _, it := range r.Items {
		if it.Outcome == o {
			n++
		}
	}
	return n
}

// Options configures a recovery pass.
type Options struct {
	DryRun bool
	// Timeout bounds the whole pass (zero: no bound); what it does not
	// reach is reported as failed.
	Timeout time.Duration
	// Workers finalize dead runs in parallel (their fsyncs share journal
	// commits); 0 means a default.
	Workers int
	// Now is the clock; Host names this machine in quarantine notes.
	Now  func() time.Time
	Host string
	// Holders, if set, lists the processes that hold a run's slot, as
	// the kernel shows them, for the report on an orphan.
	Holders func(record.RunID) ([]int, error)
}

// Recover brings every record in the active set to the truth and sweeps
// what crashes left behind. It is idempotent and safe to run concurrently
// with itself and with admissions: every change to a run is made under
// that run's fence, and the sweep of leftovers under the admission lock.
// One bad item never stops the others.
func Recover(st *runstore.Store, opts Options) (*Report, error) {
	report := &Report{Version: ReportVersion, DryRun: opts.DryRun, Items: []Item{}}
	if !st.Exists() {
		return report, nil // nothing was ever run here
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	deadline := time.Now().Add(opts.Timeout)
	if opts.Timeout <= 0 {
		deadline = time.Now().Add(100 * 365 * 24 * time.Hour) // no limit
	}
	if !opts.DryRun {
		// A layout directory missing (owners/, a root copied without its
		// empty directories) would keep runs from being fenced, and so
		// from being finalized or quarantined.
		if err := st.Ensure(); err != nil {
			return nil, err
		}
	}
	entries, err := st.ListActive()
	if err != nil {
		return nil, err
	}
	r := &recoverer{st: st, opts: opts}
	report.Items = append(report.Items, r.runs(entries, deadline)...)
	report.Items = append(report.Items, r.sweep(deadline)...)
	report.Items = append(report.Items, r.index(deadline)...)
	return report, nil
}

// index makes the index of finished runs agree with the finished records,
// after the runs above were finalized (each of which indexed itself): it
// is derived, so anything wrong with it is repaired, never reported as a
// problem of the runs.
func (r *recoverer) index(deadline time.Time) []Item {
	if time.Now().After(deadline) {
		return []Item{{Path: r.st.FinishIndex().IndexPath(), Outcome: FailedItem, Reason: fmt.Sprintf("index of finished runs not reached within --timeout %s", r.opts.Timeout)}}
	}
	rep, err := r.st.FinishIndex().CheckIndex(r.opts.DryRun)
	item := Item{Path: r.st.FinishIndex().IndexPath(), Outcome: Indexed}
	would := ""
	if r.opts.DryRun {
		would = "would "
	}
	switch {
	case err != nil:
		item.Outcome, item.Reason = FailedItem, err.Error()
	case rep.Rebuilt:
		item.Reason = fmt.Sprintf("%sbuild the index of finished runs anew from their records (%s)", would, rep.Why)
		if !r.opts.DryRun {
			item.Reason = fmt.Sprintf("built the index of finished runs anew from their records, %d runs (%s)", rep.Runs, rep.Why)
		}
	case rep.Added+rep.Changed+rep.Junk > 0:
		item.Reason = indexChanges(rep, r.opts.DryRun)
	default:
		return nil
	}
	return []Item{item}
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

type recoverer struct {
	st   *runstore.Store
	opts Options
}

func (r *recoverer) now() time.Time { return r.opts.Now().UTC() }

func (r *recoverer) runs(entries []backend.ActiveEntry, deadline time.Time) []Item {
	workers := cmp.Or(r.opts.Workers, 8)
	results := make([][]Item, len(entries))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				e := entries[i]
				if time.Now().After(deadline) {
					results[i] = []Item{{RunID: string(e.ID), Path: e.Path, Outcome: FailedItem,
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
	var items []Item
	for _, res := range results {
		items = append(items, res...)
	}
	slices.SortStableFunc(items, func(a, b Item) int { return cmp.Compare(a.Path, b.Path) })
	return items
}

// entry decides about one file of the active set.
func (r *recoverer) entry(e backend.ActiveEntry) []Item {
	item := Item{RunID: string(e.ID), Path: e.Path}
	if e.Rec != nil {
		item.Task = e.Rec.Task
	}
	one := func(o Outcome, reason string) []Item {
		item.Outcome, item.Reason = o, reason
		return []Item{item}
	}
	dry := r.opts.DryRun
	if e.ID == "" {
		if dry {
			return one(Quarantined, fmt.Sprintf("would move to quarantine: %v", e.Err))
		}
		dest, err := r.st.QuarantineActive(e.Name, e.Err.Error(), r.now(), r.opts.Host)
		if err != nil {
			return one(FailedItem, err.Error())
		}
		return one(Quarantined, fmt.Sprintf("%v; moved to %s", e.Err, dest))
	}
	owner := r.st.OwnerState(e.ID, lockIDs(e.Rec))
	switch {
	case owner.Err != nil:
		return one(FailedItem, fmt.Sprintf("cannot tell whether its owner lives: %v", owner.Err))
	case e.Finished && owner.Owner == record.Alive:
		return one(Alive, "already finished; its supervisor is completing the finalization")
	case e.Finished && dry:
		return one(Cleaned, "would remove the leftover active file of a finished run")
	case e.Finished:
		return r.finalize(item, e.ID)
	case e.Err != nil && owner.Owner == record.Alive:
		return one(Alive, fmt.Sprintf("%v; its owner lock is held by a living process, so it is left in place and counts as holding a slot", e.Err))
	case e.Err != nil && dry:
		return one(Quarantined, fmt.Sprintf("would move to quarantine: %v", e.Err))
	case e.Err != nil:
		return r.quarantine(item, e)
	case owner.Owner == record.Alive && owner.Supervisor == record.Alive:
		return one(Alive, "")
	case owner.Owner == record.Alive:
		return []Item{r.orphan(item, e.Rec)}
	case dry:
		return one(Finalized, "would finalize as interrupted: the owner lock is free")
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
func (r *recoverer) orphan(item Item, rec *record.Run) Item {
	cmd := "the command (its start was not recorded)"
	if rec.TaskPID != 0 {
		cmd = fmt.Sprintf("command pid %d (process group %d)", rec.TaskPID, rec.PGID)
	}
	held := ""
	if r.opts.Holders != nil {
		pids, err := r.opts.Holders(rec.RunID)
		switch {
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
	}
	item.Outcome = Orphaned
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
func (r *recoverer) finalize(item Item, id record.RunID) []Item {
	outcome, rec, err := FinalizeDead(r.st, id, r.now())
	if err != nil {
		item.Outcome, item.Reason = FailedItem, err.Error()
		return []Item{item}
	}
	switch outcome {
	case backend.Reaped:
		item.Outcome, item.Reason = Finalized, rec.Reason
	case backend.LeftoverRemoved:
		item.Outcome = Cleaned
		item.Reason = fmt.Sprintf("run had already finished (%s); removed its leftover active file and locks", rec.State)
	case backend.OwnerBusy:
		// Someone took the run's locks after we looked: it is theirs.
		item.Outcome, item.Reason = Alive, "locked by another process (its command, or another recovery) while being examined; left alone"
	case backend.AlreadyDone:
		return nil
	}
	return []Item{item}
}

// quarantine moves an unreadable record aside under the run's fence.
func (r *recoverer) quarantine(item Item, e backend.ActiveEntry) []Item {
	locks, err := r.st.Fence(e.ID, nil) // unreadable: its record names no lock files
	switch {
	case errors.Is(err, runstore.ErrRunBusy):
		item.Outcome, item.Reason = Alive, "locked by a living process while being examined; left alone"
		return []Item{item}
	case errors.Is(err, runstore.ErrRunDone):
		return nil
	case err != nil:
		item.Outcome, item.Reason = FailedItem, err.Error()
		return []Item{item}
	}
	if !r.st.ActiveFileExists(e.Name) {
		// Finalized by someone else since it was listed.
		locks.Release()
		return nil
	}
	dest, err := r.st.QuarantineActive(e.Name, e.Err.Error(), r.now(), r.opts.Host)
	if err != nil {
		locks.Release()
		item.Outcome, item.Reason = FailedItem, err.Error()
		return []Item{item}
	}
	if err := locks.Withdraw(); err != nil {
		item.Outcome, item.Reason = FailedItem, fmt.Sprintf("moved to %s, but: %v", dest, err)
		return []Item{item}
	}
	item.Outcome, item.Reason = Quarantined, fmt.Sprintf("%v; moved to %s", e.Err, dest)
	return []Item{item}
}

// sweep removes what crashes left outside run records: lock files with no
// record, temporary files of interrupted atomic writes, dead waiters'
// tickets, logs of runs that no longer exist. It runs under the admission
// lock, so no reservation is half-made while it looks.
func (r *recoverer) sweep(deadline time.Time) []Item {
	st := r.st
	var adm *runstore.Admission
	if !r.opts.DryRun {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return []Item{{Path: st.Root(), Outcome: FailedItem, Reason: fmt.Sprintf("leftover sweep not reached within --timeout %s", r.opts.Timeout)}}
		}
		var err error
		adm, err = st.LockAdmission(context.Background(), remaining)
		if err != nil {
			return []Item{{Path: st.Root(), Outcome: FailedItem, Reason: "leftover sweep not done: " + err.Error()}}
		}
		defer adm.Release()
	}
	leftovers, err := st.Leftovers()
	if err != nil {
		return []Item{{Path: st.Root(), Outcome: FailedItem, Reason: err.Error()}}
	}
	var items []Item
	for _, l := range leftovers {
		item := Item{RunID: string(l.ID), Task: l.Task, Path: l.Path, Outcome: Cleaned, Reason: leftoverReason(l.Kind)}
		if r.opts.DryRun {
			item.Reason = "would remove: " + item.Reason
			items = append(items, item)
			continue
		}
		removed, err := adm.RemoveLeftover(l)
		if err != nil {
			item.Outcome, item.Reason = FailedItem, err.Error()
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
