package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/runstore"
)

// RecoverVersion is the version of the `crew recover --json` schema.
const RecoverVersion = 1

// Outcome is what recovery did (or, with --dry-run, would do) with one item.
type Outcome string

const (
	Finalized   Outcome = "finalized"   // owner gone: recorded as interrupted, out of the active set
	Orphaned    Outcome = "orphaned"    // supervisor gone, command still running: left running
	Alive       Outcome = "alive"       // someone still works on it: skipped
	Quarantined Outcome = "quarantined" // unreadable record moved to quarantine/
	Cleaned     Outcome = "cleaned"     // leftover file of a crash removed
	FailedItem  Outcome = "failed"      // could not be handled (or not reached in time)
)

// RecoverItem is one line of the recovery report.
type RecoverItem struct {
	RunID   string  `json:"runId"`
	Task    string  `json:"task"`
	Path    string  `json:"path"`
	Outcome Outcome `json:"outcome"`
	Reason  string  `json:"reason"`
}

// RecoverReport is `crew recover`'s result.
type RecoverReport struct {
	Version int           `json:"version"`
	DryRun  bool          `json:"dryRun"`
	Items   []RecoverItem `json:"items"`
}

// Count returns how many items had outcome o.
func (r *RecoverReport) Count(o Outcome) int {
	n := 0
	for _, it := range r.Items {
		if it.Outcome == o {
			n++
		}
	}
	return n
}

// RecoverOptions configures a recovery pass.
type RecoverOptions struct {
	DryRun bool
	// Timeout bounds the whole pass (zero: no bound); what it does not
	// reach is reported as failed.
	Timeout time.Duration
	// Workers finalize dead runs in parallel (their fsyncs share journal
	// commits); 0 means a default.
	Workers int
}

// Recover brings every record in the active set to the truth and sweeps
// what crashes left behind. It is idempotent and safe to run concurrently
// with itself and with admissions: every change to a run is made under
// that run's fence, and the sweep of leftovers under the admission lock.
// One bad item never stops the others.
func (d *Dispatcher) Recover(opts RecoverOptions) (*RecoverReport, error) {
	report := &RecoverReport{Version: RecoverVersion, DryRun: opts.DryRun, Items: []RecoverItem{}}
	if _, err := os.Stat(d.Store.Root); errors.Is(err, os.ErrNotExist) {
		return report, nil // nothing was ever run here
	}
	deadline := time.Now().Add(opts.Timeout)
	if opts.Timeout <= 0 {
		deadline = time.Now().Add(100 * 365 * 24 * time.Hour) // no limit
	}
	entries, err := d.Store.ListActive()
	if err != nil {
		return nil, err
	}
	report.Items = append(report.Items, d.recoverRuns(entries, opts, deadline)...)
	report.Items = append(report.Items, d.sweepLeftovers(opts, deadline)...)
	return report, nil
}

func (d *Dispatcher) recoverRuns(entries []runstore.ActiveEntry, opts RecoverOptions, deadline time.Time) []RecoverItem {
	workers := cmp.Or(opts.Workers, 8)
	results := make([][]RecoverItem, len(entries))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				e := entries[i]
				if time.Now().After(deadline) {
					results[i] = []RecoverItem{{RunID: string(e.ID), Path: e.Path, Outcome: FailedItem,
						Reason: fmt.Sprintf("not reached within --timeout %s", opts.Timeout)}}
					continue
				}
				results[i] = d.recoverEntry(e, opts.DryRun)
			}
		}()
	}
	for i := range entries {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	var items []RecoverItem
	for _, r := range results {
		items = append(items, r...)
	}
	slices.SortStableFunc(items, func(a, b RecoverItem) int { return cmp.Compare(a.Path, b.Path) })
	return items
}

// recoverEntry decides about one file of the active set.
func (d *Dispatcher) recoverEntry(e runstore.ActiveEntry, dry bool) []RecoverItem {
	st := d.Store
	item := RecoverItem{RunID: string(e.ID), Path: e.Path}
	if e.Rec != nil {
		item.Task = e.Rec.Task
	}
	fail := func(err error) []RecoverItem {
		item.Outcome, item.Reason = FailedItem, err.Error()
		return []RecoverItem{item}
	}
	one := func(o Outcome, reason string) []RecoverItem {
		item.Outcome, item.Reason = o, reason
		return []RecoverItem{item}
	}
	if e.ID == "" {
		if dry {
			return one(Quarantined, fmt.Sprintf("would move to quarantine: %v", e.Err))
		}
		dest, err := d.quarantine(e.Path, e.Err.Error())
		if err != nil {
			return fail(err)
		}
		return one(Quarantined, fmt.Sprintf("%v; moved to %s", e.Err, dest))
	}
	ownerHeld, err := lockfs.Probe(st.OwnerLockPath(e.ID))
	if err != nil {
		return fail(err)
	}
	supHeld, err := lockfs.Probe(st.SupervisorLockPath(e.ID))
	if err != nil {
		return fail(err)
	}

	switch {
	case e.Finished:
		if ownerHeld {
			return one(Alive, "already finished; its supervisor is completing the finalization")
		}
		if dry {
			return one(Cleaned, "would remove the leftover active file of a finished run")
		}
		return d.finalizeItem(item, e.ID)
	case e.Err != nil:
		if ownerHeld {
			return one(Alive, fmt.Sprintf("%v; its owner lock is held by a living process, so it is left in place and counts as holding a slot", e.Err))
		}
		if dry {
			return one(Quarantined, fmt.Sprintf("would move to quarantine: %v", e.Err))
		}
		return d.quarantineRun(item, e)
	case ownerHeld && supHeld:
		return one(Alive, "")
	case ownerHeld:
		return one(Orphaned, orphanReason(e.Rec))
	case dry:
		return one(Finalized, "would finalize as interrupted: the owner lock is free")
	default:
		return d.finalizeItem(item, e.ID)
	}
}

func orphanReason(rec *runstore.Record) string {
	cmd := "the command (its start was not recorded)"
	if rec.TaskPID != 0 {
		cmd = fmt.Sprintf("command pid %d (process group %d)", rec.TaskPID, rec.PGID)
	}
	return fmt.Sprintf("supervisor process %d on host %s is gone, but %s still runs and holds the slot; left running (stop it, or let it finish, then run crew recover again)",
		rec.SupervisorPID, rec.Host, cmd)
}

// finalizeItem finalizes a dead run and reports what happened.
func (d *Dispatcher) finalizeItem(item RecoverItem, id runstore.RunID) []RecoverItem {
	outcome, rec, err := d.finalizeDead(id)
	if err != nil {
		item.Outcome, item.Reason = FailedItem, err.Error()
		return []RecoverItem{item}
	}
	switch outcome {
	case Reaped:
		item.Outcome, item.Reason = Finalized, rec.Reason
	case LeftoverRemoved:
		item.Outcome = Cleaned
		item.Reason = fmt.Sprintf("run had already finished (%s); removed its leftover active file and locks", rec.State)
	case OwnerBusy:
		// Someone took the run's locks after we looked: it is theirs.
		item.Outcome, item.Reason = Alive, "locked by another process (its command, or another recovery) while being examined; left alone"
	case AlreadyDone:
		return nil
	}
	return []RecoverItem{item}
}

// quarantineRun moves an unreadable record aside under the run's fence.
func (d *Dispatcher) quarantineRun(item RecoverItem, e runstore.ActiveEntry) []RecoverItem {
	f, err := d.takeFence(e.ID)
	switch {
	case errors.Is(err, errFenceBusy):
		item.Outcome, item.Reason = Alive, "locked by a living process while being examined; left alone"
		return []RecoverItem{item}
	case errors.Is(err, errFenceDone):
		return nil
	case err != nil:
		item.Outcome, item.Reason = FailedItem, err.Error()
		return []RecoverItem{item}
	}
	if _, err := os.Lstat(e.Path); errors.Is(err, os.ErrNotExist) {
		// Finalized by someone else since it was listed.
		f.release()
		return nil
	}
	dest, err := d.quarantine(e.Path, e.Err.Error())
	if err != nil {
		f.release()
		item.Outcome, item.Reason = FailedItem, err.Error()
		return []RecoverItem{item}
	}
	if err := f.removeAndRelease(d, e.ID); err != nil {
		item.Outcome, item.Reason = FailedItem, fmt.Sprintf("moved to %s, but: %v", dest, err)
		return []RecoverItem{item}
	}
	item.Outcome, item.Reason = Quarantined, fmt.Sprintf("%v; moved to %s", e.Err, dest)
	return []RecoverItem{item}
}

// quarantine moves path into quarantine/ (never deleting it) next to a
// note that says why, and returns the new path.
func (d *Dispatcher) quarantine(path, why string) (string, error) {
	qdir := d.Store.QuarantineDir()
	if err := os.MkdirAll(qdir, runstore.DirPerm); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	dest := filepath.Join(qdir, filepath.Base(path))
	if _, err := os.Lstat(dest); err == nil {
		dest = fmt.Sprintf("%s.%d", dest, time.Now().UnixNano())
	}
	note := fmt.Sprintf("quarantined at %s by crew recover (pid %d on %s)\noriginal path: %s\nreason: %s\n",
		d.now().Format(time.RFC3339), os.Getpid(), d.Host, path, why)
	if err := runstore.WriteDurable(dest+".why", []byte(note)); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	if err := os.Rename(path, dest); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	if err := runstore.SyncDir(qdir); err != nil {
		return "", err
	}
	return dest, runstore.SyncDir(filepath.Dir(path))
}

// sweepLeftovers removes what crashes left outside run records: owner lock
// files with no record, and temporary files of interrupted atomic writes.
// It runs under the admission lock, so no reservation is half-made while it
// looks, and takes each run's owner lock before removing that run's files.
func (d *Dispatcher) sweepLeftovers(opts RecoverOptions, deadline time.Time) []RecoverItem {
	st := d.Store
	if !opts.DryRun {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return []RecoverItem{{Path: st.Root, Outcome: FailedItem, Reason: fmt.Sprintf("leftover sweep not reached within --timeout %s", opts.Timeout)}}
		}
		lock, err := lockfs.AcquireAdmission(context.Background(), st.AdmissionLockPath(), st.AdmissionHolderPath(), remaining)
		if err != nil {
			return []RecoverItem{{Path: st.Root, Outcome: FailedItem, Reason: "leftover sweep not done: " + err.Error()}}
		}
		defer lock.Release()
	}
	var items []RecoverItem
	items = append(items, d.sweepOwnerLocks(opts.DryRun)...)
	items = append(items, d.sweepTickets(opts.DryRun)...)
	dirs := []string{st.Root, st.ActiveDir(), st.QuarantineDir(), st.QueueDir()}
	if days, err := os.ReadDir(st.DoneDir()); err == nil {
		for _, day := range days {
			if day.IsDir() {
				dirs = append(dirs, filepath.Join(st.DoneDir(), day.Name()))
			}
		}
	}
	for _, dir := range dirs {
		items = append(items, d.sweepTemps(dir, opts.DryRun)...)
	}
	return items
}

func (d *Dispatcher) sweepOwnerLocks(dry bool) []RecoverItem {
	st := d.Store
	names, _ := runstore.ReadDirNames(st.OwnersDir())
	var items []RecoverItem
	for _, name := range names {
		base, ok := strings.CutSuffix(name, ".lock")
		if !ok {
			continue
		}
		base = strings.TrimSuffix(base, ".supervisor")
		if !runstore.LooksLikeRunID(base) {
			continue
		}
		id := runstore.RunID(base)
		if _, err := os.Stat(st.ActivePath(id)); err == nil {
			continue // its run is in the active set: handled with the run
		}
		path := filepath.Join(st.OwnersDir(), name)
		item := RecoverItem{RunID: string(id), Path: path, Outcome: Cleaned,
			Reason: "lock file with no active run (left by a crash before the run's record was written, or after it was finalized)"}
		if dry {
			if held, _ := lockfs.Probe(path); !held {
				item.Reason = "would remove: " + item.Reason
				items = append(items, item)
			}
			continue
		}
		l, err := lockfs.TryOwner(path)
		if err != nil {
			continue // held (a supervisor finishing up) or already gone
		}
		if _, err := os.Stat(st.ActivePath(id)); err == nil {
			_ = l.Release()
			continue
		}
		if err := l.RemoveAndRelease(); err != nil {
			item.Outcome, item.Reason = FailedItem, err.Error()
		}
		items = append(items, item)
	}
	return items
}

// sweepTemps removes dot-files (temporary files of interrupted atomic
// writes) in dir. A temporary file of a run's record is removed only while
// that run's owner lock is provably free; others (crew.json's) are written
// under the admission lock, which the sweep holds.
func (d *Dispatcher) sweepTemps(dir string, dry bool) []RecoverItem {
	names, _ := runstore.ReadDirNames(dir)
	var items []RecoverItem
	for _, name := range names {
		if !runstore.IsTempName(name) || name == ".locks" {
			continue
		}
		path := filepath.Join(dir, name)
		if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		item := RecoverItem{Path: path, Outcome: Cleaned, Reason: "temporary file of an interrupted atomic write"}
		if id, ok := idFromTempName(name); ok {
			item.RunID = string(id)
			held, _ := lockfs.Probe(d.Store.OwnerLockPath(id))
			if held {
				continue // its run is being written right now
			}
			if !dry {
				l, err := lockfs.TryOwner(d.Store.OwnerLockPath(id))
				if errors.Is(err, lockfs.ErrBusy) {
					continue
				}
				if err == nil {
					defer l.Release()
				}
			}
		}
		if dry {
			item.Reason = "would remove: " + item.Reason
		} else if err := os.Remove(path); err != nil {
			item.Outcome, item.Reason = FailedItem, err.Error()
		}
		items = append(items, item)
	}
	return items
}

// sweepTickets removes the queue tickets of waiters that died (their lock
// is free). They never counted; this only tidies up.
func (d *Dispatcher) sweepTickets(dry bool) []RecoverItem {
	st := d.Store
	entries, err := st.ListTickets()
	if err != nil {
		return []RecoverItem{{Path: st.QueueDir(), Outcome: FailedItem, Reason: err.Error()}}
	}
	var items []RecoverItem
	for _, e := range entries {
		if held, _ := lockfs.Probe(st.TicketLockPath(e.ID)); held {
			continue
		}
		item := RecoverItem{RunID: string(e.ID), Path: st.TicketPath(e.ID), Outcome: Cleaned,
			Reason: "queue ticket of a waiting start that died"}
		if e.Ticket != nil {
			item.Task = e.Ticket.Task
		}
		if dry {
			item.Reason = "would remove: " + item.Reason
			items = append(items, item)
			continue
		}
		if d.removeDeadTicket(e.ID) {
			items = append(items, item)
		}
	}
	// Locks and bells whose ticket is gone (a waiter killed while joining
	// or leaving the queue).
	names, _ := runstore.ReadDirNames(st.QueueDir())
	for _, name := range names {
		base, ok := strings.CutSuffix(name, ".lock")
		if !ok || !runstore.LooksLikeRunID(base) {
			continue
		}
		id := runstore.RunID(base)
		if _, err := os.Stat(st.TicketPath(id)); err == nil {
			continue
		}
		item := RecoverItem{RunID: base, Path: st.TicketLockPath(id), Outcome: Cleaned,
			Reason: "queue lock with no ticket (a waiting start killed while joining or leaving the queue)"}
		if dry {
			if held, _ := lockfs.Probe(st.TicketLockPath(id)); !held {
				item.Reason = "would remove: " + item.Reason
				items = append(items, item)
			}
			continue
		}
		l, err := lockfs.TryOwner(st.TicketLockPath(id))
		if err != nil {
			continue
		}
		if _, err := os.Stat(st.TicketPath(id)); err == nil {
			_ = l.Release()
			continue
		}
		_ = os.Remove(st.BellPath(id))
		_ = l.RemoveAndRelease()
		items = append(items, item)
	}
	return items
}
