package finishindex_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/finishindex"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/storetest"
)

func ids(runs []*record.Run) []record.RunID {
	out := make([]record.RunID, len(runs))
	for i, r := range runs {
		out[i] = r.RunID
	}
	return out
}

func mustQuery(t *testing.T, s *runstore.Store, q backend.FinishedQuery) *backend.Finished {
	t.Helper()
	res, err := s.FinishIndex().FinishedRuns(q)
	if err != nil {
		t.Fatalf("FinishedRuns(%+v) = %v", q, err)
	}
	return res
}

// indexedIDs lists the run ids of the index's intact entries, in file
// order.
func indexedIDs(t *testing.T, s *runstore.Store) []record.RunID {
	t.Helper()
	f, size, why := s.FinishIndex().OpenIndex()
	if f == nil {
		t.Fatalf("no usable index: %v", why)
	}
	defer f.Close()
	entries, err := finishindex.ReadIndex(f, size)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]record.RunID, len(entries))
	for i, e := range entries {
		out[i] = e.ID
	}
	return out
}

// A fresh state root has an empty index; runs are listed newest finish
// first, whatever order they were created in, and across shards.
func TestFinishedRunsNewestFinishFirst(t *testing.T) {
	s := newStore(t)
	if got := storetest.ReadString(t, s.FinishIndex().IndexPath()); got != finishindex.FinishedIdxHeader {
		t.Fatalf("fresh index = %q, want just the header", got)
	}
	// Created an hour apart (two shards), finished in the other order.
	long := storetest.Finished(indexBase, indexBase.Add(3*time.Hour), 1, "long", record.Succeeded)
	short := storetest.Finished(indexBase.Add(time.Hour), indexBase.Add(time.Hour+time.Minute), 2, "short", record.Failed)
	mid := storetest.Finished(indexBase.Add(2*time.Hour), indexBase.Add(2*time.Hour+time.Second), 3, "mid", record.Stopped)
	for _, rec := range []*record.Run{short, mid, long} {
		finishAsSupervisor(t, s, rec)
	}
	want := []record.RunID{long.RunID, mid.RunID, short.RunID}
	res := mustQuery(t, s, backend.FinishedQuery{})
	if got := ids(res.Runs); !slices.Equal(got, want) || res.Unindexed != "" {
		t.Fatalf("FinishedRuns = %v (unindexed %q), want %v by finish", got, res.Unindexed, want)
	}
	if got := ids(mustQuery(t, s, backend.FinishedQuery{Limit: 2}).Runs); !slices.Equal(got, want[:2]) {
		t.Errorf("Limit 2 = %v, want %v", got, want[:2])
	}
	failed := func(_ string, st record.State, _ *int) bool { return st != record.Succeeded }
	if got := ids(mustQuery(t, s, backend.FinishedQuery{Match: failed}).Runs); !slices.Equal(got, want[1:]) {
		t.Errorf("not succeeded = %v, want %v", got, want[1:])
	}
	since := backend.FinishedQuery{Since: indexBase.Add(2 * time.Hour)}
	if got := ids(mustQuery(t, s, since).Runs); !slices.Equal(got, want[:2]) {
		t.Errorf("Since = %v, want %v", got, want[:2])
	}
	task := func(task string, _ record.State, _ *int) bool { return task == "short" }
	if got := ids(mustQuery(t, s, backend.FinishedQuery{Match: task, Limit: 1}).Runs); !slices.Equal(got, []record.RunID{short.RunID}) {
		t.Errorf("task short = %v", got)
	}
	// The same answers without the index, from the records' files.
	if err := os.Remove(s.FinishIndex().IndexPath()); err != nil {
		t.Fatal(err)
	}
	setMtime(t, s, short, *short.FinishedAt)
	setMtime(t, s, mid, *mid.FinishedAt)
	setMtime(t, s, long, *long.FinishedAt)
	res = mustQuery(t, s, backend.FinishedQuery{})
	if got := ids(res.Runs); !slices.Equal(got, want) || !strings.Contains(res.Unindexed, "there is no index") {
		t.Fatalf("without the index = %v (unindexed %q), want %v", got, res.Unindexed, want)
	}
	if got := ids(mustQuery(t, s, backend.FinishedQuery{Limit: 1}).Runs); !slices.Equal(got, want[:1]) {
		t.Errorf("without the index, Limit 1 = %v", got)
	}
}

// setMtime gives a record's file (and its shard) a modification time, as
// if it had been written then.
func setMtime(t *testing.T, s *runstore.Store, rec *record.Run, at time.Time) {
	t.Helper()
	if err := os.Chtimes(s.DonePath(rec.RunID), at, at); err != nil {
		t.Fatal(err)
	}
	shard := osPath(s, shardDir(rec.RunID))
	if fi, err := os.Stat(shard); err == nil && fi.ModTime().Before(at) {
		_ = os.Chtimes(shard, at, at)
	}
}

// The index is a hint: an entry whose record was pruned is skipped, and
// the record, not the entry, is what is returned.
func TestFinishedRunsTheRecordWins(t *testing.T) {
	s := newStore(t)
	a := storetest.Finished(indexBase, indexBase.Add(time.Minute), 1, "a", record.Succeeded)
	b := storetest.Finished(indexBase, indexBase.Add(2*time.Minute), 2, "b", record.Succeeded)
	finishAsSupervisor(t, s, a)
	finishAsSupervisor(t, s, b)
	if err := s.RemoveFinished(b.RunID); err != nil {
		t.Fatal(err)
	}
	// a's record is rewritten (by hand) with another reason.
	changed := *a
	changed.Reason = "the record says so"
	data, _ := changed.Encode()
	storetest.WriteString(t, s.DonePath(a.RunID), string(data))
	res := mustQuery(t, s, backend.FinishedQuery{Limit: 1})
	if len(res.Runs) != 1 || res.Runs[0].RunID != a.RunID || res.Runs[0].Reason != "the record says so" {
		t.Fatalf("FinishedRuns = %+v, want a's record as it is now", res.Runs)
	}
}

// A run whose entry never made it (a crash between its final record and
// its index entry) is still in the active set: readers given it in Also
// list it, and whoever finalizes the leftover indexes it.
func TestFinishedLeftoverIsListedAndIndexedByItsFinalizer(t *testing.T) {
	s := newStore(t)
	rec := storetest.Finished(indexBase, indexBase.Add(time.Minute), 1, "crashed", record.Succeeded)
	writeActive(t, s, storetest.Record(rec.RunID, record.Running))
	writeDone(t, s, rec) // the crash came here
	if got := ids(mustQuery(t, s, backend.FinishedQuery{}).Runs); len(got) != 0 {
		t.Fatalf("the index lists %v before the leftover is given", got)
	}
	if got := ids(mustQuery(t, s, backend.FinishedQuery{Also: []record.RunID{rec.RunID}}).Runs); !slices.Equal(got, []record.RunID{rec.RunID}) {
		t.Fatalf("with the leftover in Also = %v", got)
	}
	f, err := s.Fence(rec.RunID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Finish(rec); err != nil {
		t.Fatal(err)
	}
	if got := indexedIDs(t, s); !slices.Equal(got, []record.RunID{rec.RunID}) {
		t.Fatalf("index after the leftover was finalized = %v", got)
	}
}

// Concurrent finishers, with no lock of crew's, never lose each other's
// entries, even while compactions replace the file under them.
func TestIndexConcurrentAppendsSurviveCompactions(t *testing.T) {
	s := newStore(t)
	const writers, each = 6, 40
	var live []*record.Run
	for w := range writers {
		for i := range each {
			rec := storetest.Finished(indexBase.Add(time.Duration(w)*time.Hour), indexBase.Add(time.Duration(w*each+i)*time.Second), w*each+i, fmt.Sprintf("w%d", w), record.Succeeded)
			writeDoneFast(t, s, rec.RunID)
			live = append(live, rec)
		}
	}
	dir, err := s.FinishIndex().OpenRuns()
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	stop := make(chan struct{})
	compactions := make(chan int, 1)
	// Writers wait halfway for the first compaction, so that appends and
	// replacements do interleave however the goroutines are scheduled.
	compacted := make(chan struct{})
	go func() {
		// Entries of runs that have no record, then a compaction that
		// drops them: the file is replaced again and again.
		n := 0
		for i := 0; ; i++ {
			select {
			case <-stop:
				compactions <- n
				return
			default:
			}
			ghost := storetest.Finished(indexBase.Add(100*time.Hour), indexBase, 10000+i, "ghost", record.Succeeded)
			if ok, _ := s.FinishIndex().AppendFinished(dir, []finishindex.FinishedEntry{finishindex.EntryOf(ghost, time.Time{})}); !ok {
				t.Error("ghost append failed")
			}
			if dropped, err := s.FinishIndex().CompactIndex(); err != nil {
				t.Errorf("CompactIndex = %v", err)
			} else if dropped > 0 {
				if n++; n == 1 {
					close(compacted)
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, rec := range live[w*each : (w+1)*each] {
				if i == each/2 {
					select {
					case <-compacted:
					case <-time.After(30 * time.Second): // a deadlock guard, not a timing
						t.Error("no compaction while the writers waited")
					}
				}
				if !s.FinishIndex().Append(rec) {
					t.Errorf("indexFinished(%s) = false", rec.RunID)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if n := <-compactions; n == 0 {
		t.Fatal("no compaction replaced the index while appends ran: the test proved nothing")
	}
	got := map[record.RunID]bool{}
	for _, id := range indexedIDs(t, s) {
		got[id] = true
	}
	for _, rec := range live {
		if !got[rec.RunID] {
			t.Errorf("entry of %s lost", rec.RunID)
		}
	}
}

// Compaction drops the entries of pruned runs and duplicates, keeps the
// order, and carries over what was appended while it worked.
func TestCompactIndex(t *testing.T) {
	s := newStore(t)
	var recs []*record.Run
	for i := range 5 {
		rec := storetest.Finished(indexBase, indexBase.Add(time.Duration(i)*time.Minute), i, "t", record.Succeeded)
		finishAsSupervisor(t, s, rec)
		recs = append(recs, rec)
	}
	// A duplicate (a leftover indexed twice) and two pruned runs.
	if !s.FinishIndex().Append(recs[1]) {
		t.Fatal("append failed")
	}
	for _, i := range []int{0, 3} {
		if err := s.RemoveFinished(recs[i].RunID); err != nil {
			t.Fatal(err)
		}
	}
	dropped, err := s.FinishIndex().CompactIndex()
	if err != nil || dropped != 3 {
		t.Fatalf("CompactIndex = %d, %v; want 3 dropped", dropped, err)
	}
	// The last entry of a run is the one kept (a newer entry overrides).
	want := []record.RunID{recs[2].RunID, recs[4].RunID, recs[1].RunID}
	if got := indexedIDs(t, s); !slices.Equal(got, want) {
		t.Fatalf("index after compaction = %v, want %v", got, want)
	}
	// An append that lands between a compaction's read and its rename.
	f, size, _ := s.FinishIndex().OpenIndex()
	defer f.Close()
	late := storetest.Finished(indexBase, indexBase.Add(time.Hour), 9, "late", record.Succeeded)
	finishAsSupervisor(t, s, late)
	dir, _ := s.FinishIndex().OpenRuns()
	defer dir.Close()
	if err := s.FinishIndex().ReplaceIndex(dir, f, size, []byte(finishindex.FinishedIdxHeader)); err != nil {
		t.Fatal(err)
	}
	if got := indexedIDs(t, s); !slices.Equal(got, []record.RunID{late.RunID}) {
		t.Fatalf("index after a replacement = %v, want the late append carried over", got)
	}
	assertNoTemp(t, osPath(s, "runs"))
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(names) > 0 {
		t.Errorf("temporary files left in %s: %v", dir, names)
	}
}

// An append that crosses a power of two from 1 MiB on asks for a
// compaction, which the run's own supervisor does once its locks are gone.
func TestIndexAsksForCompaction(t *testing.T) {
	for _, c := range []struct {
		before, after int64
		want          bool
	}{
		{0, 100, false}, {1<<20 - 10, 1<<20 + 10, true}, {1<<20 + 10, 1<<20 + 200, false},
		{2<<20 - 1, 2 << 20, true}, {1<<19 - 1, 1<<19 + 5, false},
	} {
		if got := finishindex.CrossesCompactSize(c.before, c.after); got != c.want {
			t.Errorf("finishindex.CrossesCompactSize(%d, %d) = %v, want %v", c.before, c.after, got, c.want)
		}
	}
	s := newStore(t)
	pruned := storetest.Finished(indexBase, indexBase, 1, "pruned", record.Succeeded)
	finishAsSupervisor(t, s, pruned)
	if err := s.RemoveFinished(pruned.RunID); err != nil {
		t.Fatal(err)
	}
	// Pad the index to just below 1 MiB with entries of the pruned run.
	pad := finishindex.EntryOf(pruned, indexBase).Encode(nil)
	fi, _ := os.Stat(s.FinishIndex().IndexPath())
	f, err := os.OpenFile(s.FinishIndex().IndexPath(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	for size := fi.Size(); size+int64(len(pad)) < finishindex.IndexCompactFrom; size += int64(len(pad)) {
		if _, err := f.Write(pad); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	last := storetest.Finished(indexBase, indexBase.Add(time.Hour), 2, "last", record.Succeeded)
	finishAsSupervisor(t, s, last)
	if got := indexedIDs(t, s); !slices.Equal(got, []record.RunID{last.RunID}) {
		t.Fatalf("index after the crossing append = %d entries, want only the last run's", len(got))
	}
	if fi, _ := os.Stat(s.FinishIndex().IndexPath()); fi.Size() > 1024 {
		t.Errorf("index is %d bytes after compaction", fi.Size())
	}
}

// A torn or zero-filled tail (a power cut) costs at most the entry it
// tore: the next append starts on a line of its own.
func TestIndexTornTail(t *testing.T) {
	s := newStore(t)
	a := storetest.Finished(indexBase, indexBase.Add(time.Minute), 1, "a", record.Succeeded)
	b := storetest.Finished(indexBase, indexBase.Add(2*time.Minute), 2, "b", record.Succeeded)
	finishAsSupervisor(t, s, a)
	f, err := os.OpenFile(s.FinishIndex().IndexPath(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	torn := finishindex.EntryOf(b, indexBase).Encode(nil)
	_, _ = f.Write(torn[:len(torn)/2])
	_, _ = f.Write(make([]byte, 100))
	f.Close()
	finishAsSupervisor(t, s, b)
	if got := indexedIDs(t, s); !slices.Equal(got, []record.RunID{a.RunID, b.RunID}) {
		t.Fatalf("index = %v", got)
	}
	if got := ids(mustQuery(t, s, backend.FinishedQuery{}).Runs); !slices.Equal(got, []record.RunID{b.RunID, a.RunID}) {
		t.Fatalf("FinishedRuns = %v", got)
	}
}

// The scan of the newest entries stops once no older entry can be among
// them, and never misses a newer finish appended before an older one: a
// run whose old finish is appended late (an outcome recovered after a
// full disk) sits among the newest appends, in front of newer finishes.
func TestFinishedRunsScanStopsButMissesNothing(t *testing.T) {
	s := newStore(t)
	var all []*record.Run
	for i := range 200 {
		rec := storetest.Finished(indexBase, indexBase.Add(time.Duration(i)*time.Minute), i, "t", record.Succeeded)
		data, _ := rec.Encode()
		storetest.MkdirAll(t, osPath(s, shardDir(rec.RunID)))
		storetest.WriteString(t, s.DonePath(rec.RunID), string(data))
		all = append(all, rec)
	}
	// File order: 0..195 appended as they finished, then 199 (the newest
	// finish), then 50 again (a late append of an old finish), then
	// 196..198, each a second after the one before.
	order := append(slices.Clone(all[:196]), all[199], all[50], all[196], all[197], all[198])
	var lines []byte
	last := time.Time{}
	for _, rec := range order {
		at := rec.FinishedAt.Add(time.Second)
		if at.Before(last.Add(time.Second)) || rec == all[50] {
			at = last.Add(time.Second)
		}
		last = at
		lines = finishindex.EntryOf(rec, at).Encode(lines)
	}
	f, err := os.OpenFile(s.FinishIndex().IndexPath(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(lines); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res := mustQuery(t, s, backend.FinishedQuery{Limit: 3})
	want := []record.RunID{all[199].RunID, all[198].RunID, all[197].RunID}
	if got := ids(res.Runs); !slices.Equal(got, want) {
		t.Fatalf("Limit 3 = %v, want %v", got, want)
	}
	var asked int
	counting := func(string, record.State, *int) bool { asked++; return true }
	mustQuery(t, s, backend.FinishedQuery{Limit: 3, Match: counting})
	if asked > 10 {
		t.Errorf("the newest 3 of 200 looked at %d entries and records", asked)
	}
}

// Without a usable index (missing, planted, of an unknown version),
// readers use the records and say so; crew recover's CheckIndex rebuilds it
// from them, and adds the runs a usable one lacks.
func TestCheckIndexRebuildsAndCompletes(t *testing.T) {
	s := newStore(t)
	var recs []*record.Run
	for i := range 4 {
		rec := storetest.Finished(indexBase.Add(time.Duration(i)*time.Hour), indexBase.Add(time.Duration(10-i)*time.Hour), i, "t", record.Succeeded)
		finishAsSupervisor(t, s, rec)
		recs = append(recs, rec)
	}
	byFinishDesc := []record.RunID{recs[0].RunID, recs[1].RunID, recs[2].RunID, recs[3].RunID}
	for _, c := range []struct {
		name, why string
		spoil     func(path string)
	}{
		{"missing", "it is missing", func(p string) { _ = os.Remove(p) }},
		{"unknown version", "does not start with the header", func(p string) { storetest.WriteString(t, p, "crew index of finished runs, version 9\n") }},
		{"a directory", "is a directory", func(p string) { _ = os.Remove(p); storetest.MkdirAll(t, filepath.Join(p, "sub")) }},
		{"a symlink", "is a symbolic link", func(p string) { _ = os.Remove(p); _ = os.Symlink("/etc/passwd", p) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.spoil(s.FinishIndex().IndexPath())
			res := mustQuery(t, s, backend.FinishedQuery{})
			if res.Unindexed == "" {
				t.Fatal("the spoiled index was used")
			}
			if got := ids(res.Runs); !slices.Equal(got, byFinishDesc) {
				setAll := func() {
					for _, r := range recs {
						setMtime(t, s, r, *r.FinishedAt)
					}
				}
				setAll()
				if got := ids(mustQuery(t, s, backend.FinishedQuery{}).Runs); !slices.Equal(got, byFinishDesc) {
					t.Fatalf("from the records = %v, want %v", got, byFinishDesc)
				}
			}
			dry, err := s.FinishIndex().CheckIndex(true)
			if err != nil || !dry.Rebuilt || !strings.Contains(dry.Why, c.why) {
				t.Fatalf("CheckIndex(dry) = %+v, %v; want a rebuild because %q", dry, err, c.why)
			}
			rep, err := s.FinishIndex().CheckIndex(false)
			if err != nil || !rep.Rebuilt || rep.Runs != 4 {
				t.Fatalf("CheckIndex = %+v, %v", rep, err)
			}
			res = mustQuery(t, s, backend.FinishedQuery{})
			if res.Unindexed != "" || !slices.Equal(ids(res.Runs), byFinishDesc) {
				t.Fatalf("after the rebuild = %v (unindexed %q)", ids(res.Runs), res.Unindexed)
			}
			if again, err := s.FinishIndex().CheckIndex(false); err != nil || again.Rebuilt || again.Added != 0 {
				t.Fatalf("second CheckIndex = %+v, %v; want nothing to do", again, err)
			}
			assertNoTemp(t, osPath(s, "runs"))
		})
	}
	// Nothing outside the state root was touched.
	if fi, err := os.Stat("/etc/passwd"); err != nil || fi.Size() == 0 {
		t.Fatal("/etc/passwd")
	}
	// A record written behind the index's back (an older crew, a copy by
	// hand) is added by CheckIndex.
	extra := storetest.Finished(indexBase.Add(20*time.Hour), indexBase.Add(20*time.Hour), 9, "t", record.Succeeded)
	data, _ := extra.Encode()
	storetest.MkdirAll(t, osPath(s, shardDir(extra.RunID)))
	storetest.WriteString(t, s.DonePath(extra.RunID), string(data))
	rep, err := s.FinishIndex().CheckIndex(false)
	if err != nil || rep.Rebuilt || rep.Added != 1 {
		t.Fatalf("CheckIndex = %+v, %v; want 1 added", rep, err)
	}
	if got := ids(mustQuery(t, s, backend.FinishedQuery{Limit: 1}).Runs); !slices.Equal(got, []record.RunID{extra.RunID}) {
		t.Fatalf("newest = %v", got)
	}
	// A record changed by hand after it was indexed: a task filter goes by
	// the index until CheckIndex indexes the record again.
	// (Its entry says it was made an hour ago, so that the change is
	// later than the entry whatever the clocks' granularity.)
	dir, _ := s.FinishIndex().OpenRuns()
	defer dir.Close()
	old := finishindex.EntryOf(recs[2], time.Time{})
	old.Written = time.Now().Add(-time.Hour)
	if ok, _ := s.FinishIndex().AppendFinished(dir, []finishindex.FinishedEntry{old}); !ok {
		t.Fatal("append failed")
	}
	changed := *recs[2]
	changed.Task = "renamed"
	data, _ = changed.Encode()
	storetest.WriteString(t, s.DonePath(changed.RunID), string(data))
	renamed := backend.FinishedQuery{Match: func(task string, _ record.State, _ *int) bool { return task == "renamed" }}
	rep, err = s.FinishIndex().CheckIndex(false)
	if err != nil || rep.Changed != 1 || rep.Added != 0 {
		t.Fatalf("CheckIndex = %+v, %v; want 1 changed", rep, err)
	}
	if got := ids(mustQuery(t, s, renamed).Runs); !slices.Equal(got, []record.RunID{changed.RunID}) {
		t.Fatalf("runs of the renamed task = %v", got)
	}
	if again, err := s.FinishIndex().CheckIndex(false); err != nil || again.Changed+again.Added != 0 {
		t.Fatalf("second CheckIndex = %+v, %v", again, err)
	}
}

// Appenders never create the index (an index they made would lack every
// older run), and Ensure makes one only with runs/done.
func TestIndexIsCreatedOnlyComplete(t *testing.T) {
	s := newStore(t)
	if err := os.Remove(s.FinishIndex().IndexPath()); err != nil {
		t.Fatal(err)
	}
	finishAsSupervisor(t, s, storetest.Finished(indexBase, indexBase, 1, "t", record.Succeeded))
	if _, err := os.Lstat(s.FinishIndex().IndexPath()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("an append made an index: %v", err)
	}
	if err := s.Ensure(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(s.FinishIndex().IndexPath()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Ensure made an index beside existing runs: %v", err)
	}
	// The index is swept like every temporary file crash leaves.
	storetest.WriteString(t, osPath(s, "runs", "."+finishindex.FinishedIdxName+"0123456789abcdef"), "x")
	found := false
	lo, err := s.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lo {
		found = found || (l.Kind == runstore.LeftoverTemp && strings.HasSuffix(l.Path, "."+finishindex.FinishedIdxName+"0123456789abcdef"))
	}
	if !found {
		t.Error("a temporary file of the index is not a leftover")
	}
}

// An entry reads back as written, whatever the task's characters; a
// line that was changed, cut or padded is not an entry.
func TestIndexEntryRoundTrip(t *testing.T) {
	for _, task := range []string{"build", "deploy:prod", `a "quoted"	tab`, "evil\u202ename\x1b[31m", "déploiement"} {
		for _, exit := range []*int{nil, &finishindex.ExitCodes[0], &finishindex.ExitCodes[255], func() *int { n := 300; return &n }()} {
			rec := storetest.Finished(indexBase, indexBase.Add(time.Minute), 1, task, record.Stopped)
			rec.ExitCode = exit
			line := finishindex.EntryOf(rec, indexBase.Add(time.Hour)).Encode(nil)
			if line[0] != '\n' || line[len(line)-1] != '\n' || strings.Count(string(line), "\n") != 2 {
				t.Fatalf("entry %q is not one line after an empty one", line)
			}
			e, ok := finishindex.ParseEntry(line[1 : len(line)-1])
			if !ok || e.ID != rec.RunID || e.Task != task || e.State != record.Stopped || !e.Finished.Equal(*rec.FinishedAt) ||
				!e.Appended.Equal(indexBase.Add(time.Hour)) || (e.Exit == nil) != (exit == nil) || (exit != nil && *e.Exit != *exit) {
				t.Fatalf("parse(%q) = %+v, %v", line, e, ok)
			}
			body := line[1 : len(line)-1]
			for _, bad := range [][]byte{body[:len(body)-1], body[1:], append([]byte("x"), body...), []byte(strings.Replace(string(body), "stopped", "succeed", 1))} {
				if _, ok := finishindex.ParseEntry(bad); ok {
					t.Errorf("damaged line %q parsed", bad)
				}
			}
		}
	}
}

// An append can show in the index's size before all of its bytes do (the
// kernel grows the size page by page as it copies), so a compaction may
// open the index with its last entry cut in two. That entry must come
// through whole, carried over under the lock. (This race lost one entry in
// a few hundred runs of TestIndexConcurrentAppendsSurviveCompactions; here
// the cut is made on purpose.)
func TestCompactionKeepsAnEntryCutBySize(t *testing.T) {
	s := newStore(t)
	dir, err := s.FinishIndex().OpenRuns()
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	ghost := storetest.Finished(indexBase.Add(100*time.Hour), indexBase, 900, "ghost", record.Succeeded) // no record: compacted away
	kept := storetest.Finished(indexBase, indexBase.Add(time.Second), 1, "kept", record.Succeeded)
	last := storetest.Finished(indexBase, indexBase.Add(2*time.Second), 2, "last", record.Succeeded)
	writeDoneFast(t, s, kept.RunID)
	writeDoneFast(t, s, last.RunID)
	for _, rec := range []*record.Run{ghost, kept, last} {
		if ok, _ := s.FinishIndex().AppendFinished(dir, []finishindex.FinishedEntry{finishindex.EntryOf(rec, time.Time{})}); !ok {
			t.Fatalf("append %s failed", rec.RunID)
		}
	}
	f, size, why := s.FinishIndex().OpenIndex()
	if f == nil {
		t.Fatal(why)
	}
	defer f.Close()
	cut := size - 20 // in the middle of the last entry
	dropped, err := s.FinishIndex().CompactOpen(f, cut)
	if err != nil || dropped != 1 {
		t.Fatalf("compactIndex = %d, %v; want the ghost dropped", dropped, err)
	}
	if got := indexedIDs(t, s); !slices.Equal(got, []record.RunID{kept.RunID, last.RunID}) {
		t.Errorf("index after a compaction that saw the last entry cut = %v, want %v and %v", got, kept.RunID, last.RunID)
	}
}
