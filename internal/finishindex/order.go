package finishindex

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/stateroot"
)

// FinishedRuns returns the finished runs q selects, newest finish first.
// With the index its cost follows what it returns (and how far back it
// must look for matches), not the history; without one (never built, or
// unusable) it reads the records in the order of their files'
// modification times, newest first, and stops as soon as no older file can
// hold a run that would be returned. Either way, every run returned is its
// record as read now.
func (ix *Index) FinishedRuns(q backend.FinishedQuery) (*backend.Finished, error) {
	top := &topRuns{q: q, seen: map[record.RunID]bool{}}
	res := &backend.Finished{}
	f, size, why := ix.openIndex()
	if f != nil {
		problem, err := top.fromIndex(ix, f, size)
		f.Close()
		if err != nil {
			return nil, err
		}
		res.IndexProblem, res.IndexPath = problem, ix.IndexPath()
	} else {
		switch {
		case errors.Is(why, fs.ErrNotExist) && !ix.anyFinished():
			// Nothing an index would speed up: no run ever finished here
			// (or there is no state root yet).
		case errors.Is(why, fs.ErrNotExist):
			res.Unindexed = "there is no index of finished runs (" + ix.IndexPath() + ")"
		default:
			res.Unindexed = "the index of finished runs cannot be used: " + why.Error()
		}
		read := top.fromRecords
		if q.Approximate {
			read = top.fromCreation
		}
		if err := read(ix); err != nil {
			return nil, err
		}
	}
	// A finished leftover of the active set: its record is among the
	// finished runs, or, if its move there was cut short (or is under
	// way), final in the active set; read finds it in either.
	for _, id := range q.Also {
		top.read(ix, id)
	}
	res.Runs, res.Bad = top.runs, top.bad
	if res.Runs == nil {
		res.Runs = []*record.Run{}
	}
	return res, nil
}

// topRuns keeps the newest runs that match, up to the limit.
type topRuns struct {
	q    backend.FinishedQuery
	runs []*record.Run // newest first
	bad  []backend.BadRecord
	seen map[record.RunID]bool
}

func (t *topRuns) full() bool { return t.q.Limit > 0 && len(t.runs) >= t.q.Limit }

// closedBelow reports whether no run that finished before bound can be
// returned any more.
func (t *topRuns) closedBelow(bound time.Time) bool {
	if !t.q.Since.IsZero() && bound.Before(t.q.Since) {
		return true
	}
	return t.full() && bound.Before(finishOf(t.runs[len(t.runs)-1]))
}

// mayEnter reports whether a run that finished at tm could be returned.
func (t *topRuns) mayEnter(tm time.Time) bool {
	if !t.q.Since.IsZero() && tm.Before(t.q.Since) {
		return false
	}
	return !t.full() || !tm.Before(finishOf(t.runs[len(t.runs)-1]))
}

// read reads a run's record and offers it, once per run.
func (t *topRuns) read(ix *Index, id record.RunID) {
	if t.seen[id] {
		return
	}
	t.seen[id] = true
	rec, err := readFinal(ix, id)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// pruned meanwhile
	case err != nil:
		t.bad = append(t.bad, backend.BadRecord{Path: ix.recs.DonePath(id), Err: err})
	default:
		t.offer(rec) // an active state is not offered
	}
}

// readFinal reads a finished run's record where it is: among the finished
// runs, or still final in the active set. A run is indexed before it
// moves to runs/done (package runstore), and a leftover's move may be
// under way, so either read may miss it; a record moves only from the
// active set to the finished runs, so after missing it in both, one more
// look among the finished runs finds it unless it was pruned. An active
// file that cannot be read is reported by the listing of the active set,
// not here.
func readFinal(ix *Index, id record.RunID) (*record.Run, error) {
	rec, err := ix.recs.ReadDone(id)
	if !errors.Is(err, fs.ErrNotExist) {
		return rec, err
	}
	if rec, err := ix.recs.ReadActive(id); err == nil {
		return rec, nil
	}
	return ix.recs.ReadDone(id)
}

// offer keeps rec if it matches and is among the newest.
func (t *topRuns) offer(rec *record.Run) {
	if rec.State.Active() || !t.mayEnter(finishOf(rec)) {
		return
	}
	if t.q.Match != nil && !t.q.Match(rec.Task, rec.State, rec.ExitCode) {
		return
	}
	i, _ := slices.BinarySearchFunc(t.runs, rec, func(a, b *record.Run) int { return byFinish(b, a) })
	t.runs = slices.Insert(t.runs, i, rec)
	if t.q.Limit > 0 && len(t.runs) > t.q.Limit {
		t.runs = t.runs[:t.q.Limit]
	}
}

// fromIndex walks the index from its newest entry back. An entry's append
// time bounds the finish of every entry before it (to within indexSkew),
// which tells the walk when to stop (see indexWalk).
func (t *topRuns) fromIndex(ix *Index, f *os.File, size int64) (problem string, err error) {
	tasks := map[string]string{}
	var w indexWalk
	err = w.walk(f, size, func(e rawEntry) bool {
		if t.seen[record.RunID(e.id)] || !t.mayEnter(e.finishedAt()) {
			return true
		}
		if t.q.Match != nil {
			task, ok1 := e.taskOf(tasks)
			exit, ok2 := e.exitOf()
			if !ok1 || !ok2 || !t.q.Match(task, e.stateOf(), exit) {
				return true
			}
		}
		if id := string(e.id); record.WellFormedRunID(id) {
			t.read(ix, record.RunID(id))
		}
		return true
	}, func(stamp time.Time) bool { return t.closedBelow(stamp.Add(indexSkew)) })
	return w.problem(ix.IndexPath()), err
}

// fromCreation takes the newest-created finished runs that match.
func (t *topRuns) fromCreation(ix *Index) error {
	return ix.WalkFinished(func(id record.RunID) bool {
		if !t.q.Since.IsZero() {
			if created, err := id.CreatedAt(); err == nil && created.Before(t.q.Since) {
				// created before Since: finished before it or not, the runs
				// created earlier are left out (approximate)
				return false
			}
		}
		t.read(ix, id)
		return !t.full()
	})
}

// fromRecords finds the runs without the index. A record is written after
// its run finished, so its file's modification time, and its shard
// directory's, are never earlier than the finish it records: shards and
// files are read newest first until none can hold a run to return.
func (t *topRuns) fromRecords(ix *Index) error {
	shards, err := ix.Shards()
	if err != nil {
		return err
	}
	done, err := ix.done.Open()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer done.Close()
	type dated struct {
		name string
		mod  time.Time
	}
	byMod := func(a, b dated) int { return b.mod.Compare(a.mod) }
	var dirs []dated
	for _, sh := range shards {
		if fi, err := done.Lstat(sh); err == nil && fi.IsDir() {
			dirs = append(dirs, dated{sh, fi.ModTime()})
		}
	}
	slices.SortFunc(dirs, byMod)
	for _, d := range dirs {
		if t.closedBelow(d.mod.Add(mtimeSlack)) {
			return nil
		}
		names, err := ix.shardNames(d.name)
		if err != nil {
			continue // removed meanwhile, or not a directory crew may read
		}
		shard, err := ix.done.Open(d.name)
		if err != nil {
			continue
		}
		files := make([]dated, 0, len(names))
		for _, n := range names {
			if fi, err := shard.Lstat(n); err == nil {
				files = append(files, dated{n, fi.ModTime()})
			}
		}
		shard.Close()
		slices.SortFunc(files, byMod)
		for _, file := range files {
			if t.closedBelow(file.mod.Add(mtimeSlack)) {
				break
			}
			t.read(ix, stateroot.RecordID(file.name))
		}
	}
	return nil
}

// FinishedMatching lists the finished runs whose id match accepts, newest
// finish first (at most limit of them, and how many there were): the
// candidates for a run id prefix or short id. With the index it reads the
// index, and a record only to check it still exists; without one, the
// names of every finished record.
func (ix *Index) FinishedMatching(match func(record.RunID) bool, limit int) (refs []backend.FinishedRef, total int, err error) {
	var found []finishedEntry
	f, size, _ := ix.openIndex()
	if f != nil {
		tasks := map[string]string{}
		seen := map[record.RunID]bool{}
		var w indexWalk
		err = w.walk(f, size, func(r rawEntry) bool {
			if seen[record.RunID(r.id)] || !match(record.RunID(r.id)) {
				return true
			}
			if e, ok := r.entry(tasks); ok {
				seen[e.ID] = true
				found = append(found, e)
			}
			return true
		}, func(time.Time) bool { return false })
		f.Close()
		if err != nil {
			return nil, 0, err
		}
	} else {
		ids, err := ix.finishedIDs()
		if err != nil {
			return nil, 0, err
		}
		for _, id := range ids {
			if match(id) {
				if rec, err := ix.recs.ReadDone(id); err == nil {
					found = append(found, entryOf(rec, finishOf(rec)))
				}
			}
		}
		slices.SortFunc(found, func(a, b finishedEntry) int { return b.Finished.Compare(a.Finished) })
	}
	for _, e := range found {
		if !ix.recs.IsDone(e.ID) {
			continue // pruned
		}
		total++
		if limit <= 0 || len(refs) < limit {
			refs = append(refs, backend.FinishedRef{ID: e.ID, Task: e.Task, State: e.State})
		}
	}
	return refs, total, nil
}

// anyFinished reports whether the finished runs' directory exists: whether
// a run may ever have finished in this state root.
func (ix *Index) anyFinished() bool {
	dir, err := ix.done.Open()
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	dir.Close()
	return true
}

// IndexedEndOf is what the newest entry of run id in the index says of
// its end, for a waiter whose run was pruned before it could read the
// record (entries stay until a compaction or crew prune drops them). ok
// is false without a usable index, without an entry, or with the entry of
// a record crew could not read.
func (ix *Index) IndexedEndOf(id record.RunID) (end backend.IndexedEnd, ok bool) {
	f, size, _ := ix.openIndex()
	if f == nil {
		return end, false
	}
	defer f.Close()
	var w indexWalk
	_ = w.walk(f, size, func(r rawEntry) bool {
		if string(r.id) != string(id) {
			return true
		}
		if e, good := r.entry(nil); good && finalState(e.State) {
			end, ok = backend.IndexedEnd{Task: e.Task, State: e.State, Exit: e.Exit, Finished: e.Finished}, true
		}
		return false
	}, func(time.Time) bool { return false })
	return end, ok
}
