package finishindex_test

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/finishindex"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/storetest"
)

// indexWith is a store whose index lists three runs, finished a minute
// apart, with extra appended to the index as it is.
func indexWith(t *testing.T, extra []byte) (*runstore.Store, []record.RunID) {
	t.Helper()
	s := newStore(t)
	var want []record.RunID
	for i := range 3 {
		rec := storetest.Finished(indexBase, indexBase.Add(time.Duration(i+1)*time.Minute), i, fmt.Sprintf("t%d", i), record.Succeeded)
		finishAsSupervisor(t, s, rec)
		want = append([]record.RunID{rec.RunID}, want...)
	}
	appendRaw(t, s, extra)
	return s, want
}

func appendRaw(t testing.TB, s *runstore.Store, b []byte) {
	t.Helper()
	f, err := os.OpenFile(s.FinishIndex().IndexPath(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

// allocated is how many bytes fn allocates.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A newline-less tail of junk (8 MiB here; anyone who may write the state
// root can append it) costs every reader of the index what it reads of it,
// once, in bounded memory: no line longer than an entry is ever put
// together. A reader that copied or kept the junk would allocate its size
// at least, and a quadratic one many times it.
func TestIndexReadersAreLinearInAJunkTail(t *testing.T) {
	const junkBytes = 8 << 20
	s, want := indexWith(t, bytes.Repeat([]byte{'x'}, junkBytes))
	const bound = 1 << 20
	for _, c := range []struct {
		name string
		read func() error
	}{
		{"status's newest 10", func() error {
			res, err := s.FinishIndex().FinishedRuns(backend.FinishedQuery{Limit: 10})
			if err == nil && !slices.Equal(ids(res.Runs), want) {
				err = fmt.Errorf("runs %v, want %v", ids(res.Runs), want)
			}
			return err
		}},
		{"history --since", func() error {
			res, err := s.FinishIndex().FinishedRuns(backend.FinishedQuery{Since: indexBase})
			if err == nil && !slices.Equal(ids(res.Runs), want) {
				err = fmt.Errorf("runs %v, want %v", ids(res.Runs), want)
			}
			return err
		}},
		{"resolving a run id", func() error {
			_, n, err := s.FinishIndex().FinishedMatching(func(record.RunID) bool { return true }, 1)
			if err == nil && n != 3 {
				err = fmt.Errorf("%d matches, want 3", n)
			}
			return err
		}},
		{"recover's check", func() error { _, err := s.FinishIndex().CheckIndex(true); return err }},
	} {
		var err error
		if n := allocated(func() { err = c.read() }); n > bound {
			t.Errorf("%s allocated %d bytes for an index with %d bytes of junk; want under %d", c.name, n, junkBytes, bound)
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// The walk of the newest entries reads each byte at most once and
// allocates a fixed number of times, whatever the length of a junk line.
func TestIndexWalkCountsItsWork(t *testing.T) {
	for _, junk := range []int{10 << 10, 1 << 20, 4 << 20} {
		s, _ := indexWith(t, append(bytes.Repeat([]byte{0}, junk), '\n'))
		f, size, err := s.FinishIndex().OpenIndex()
		if err != nil {
			t.Fatal(err)
		}
		var w finishindex.IndexWalk
		visited := 0
		allocs := testing.AllocsPerRun(3, func() {
			w = finishindex.IndexWalk{}
			visited = 0
			if err := w.Walk(f, size, func(finishindex.RawEntry) bool { visited++; return true }, func(time.Time) bool { return false }); err != nil {
				t.Fatal(err)
			}
		})
		f.Close()
		if w.Read > size || visited != 3 || w.Junk != 1 {
			t.Errorf("junk %d: read %d bytes of %d, visited %d entries, %d junk lines; want at most the size, 3, 1", junk, w.Read, size, visited, w.Junk)
		}
		if allocs > 8 {
			t.Errorf("junk %d: %v allocations per walk; want a few, whatever the junk", junk, allocs)
		}
	}
}

// Junk is skipped and reported by every reader, and crew recover's
// CheckIndex drops it: a line that is not an entry in the middle, a tail
// longer than any entry. A short unfinished tail is not junk to a reader
// (it may be an append being written).
func TestIndexJunkIsReportedAndRepaired(t *testing.T) {
	s, want := indexWith(t, []byte("\nnot an entry\n"))
	appendRaw(t, s, finishindex.EntryOf(storetest.Finished(indexBase, indexBase, 9, "x", record.Succeeded), indexBase).Encode(nil)[:40])
	res := mustQuery(t, s, backend.FinishedQuery{})
	if !slices.Equal(ids(res.Runs), want) || !strings.Contains(res.IndexProblem, "has 1 line(s) that are not entries crew wrote") {
		t.Fatalf("runs %v, problem %q", ids(res.Runs), res.IndexProblem)
	}
	appendRaw(t, s, bytes.Repeat([]byte{'y'}, 3*finishindex.MaxEntryBytes))
	if res := mustQuery(t, s, backend.FinishedQuery{}); !strings.Contains(res.IndexProblem, "has 2 line(s)") {
		t.Fatalf("with a long tail: problem %q", res.IndexProblem)
	}
	rep, err := s.FinishIndex().CheckIndex(false)
	if err != nil || rep.Junk != 2 || rep.Rebuilt {
		t.Fatalf("CheckIndex = %+v, %v; want 2 junk lines dropped", rep, err)
	}
	res = mustQuery(t, s, backend.FinishedQuery{})
	if !slices.Equal(ids(res.Runs), want) || res.IndexProblem != "" {
		t.Fatalf("after the repair: runs %v, problem %q", ids(res.Runs), res.IndexProblem)
	}
	if rep, err := s.FinishIndex().CheckIndex(false); err != nil || rep.Junk+rep.Added+rep.Changed != 0 || rep.Rebuilt {
		t.Errorf("a second check: %+v, %v", rep, err)
	}
}

// restampLast rewrites the index with its last entry stamped at.
func restampLast(t *testing.T, s *runstore.Store, at int64) {
	t.Helper()
	f, size, err := s.FinishIndex().OpenIndex()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := finishindex.ReadIndex(f, size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	entries[len(entries)-1].Appended = time.Unix(0, at)
	content := []byte(finishindex.FinishedIdxHeader)
	for _, e := range entries {
		content = e.Encode(content)
	}
	storetest.WriteString(t, s.FinishIndex().IndexPath(), string(content))
}

// One entry stamped early (a clock stepped back, or year 1677: the
// smallest stamp there is) hides nothing: a walk that would end at it
// reads on, finds stamps out of order, reads everything and says so;
// crew recover rebuilds the index in order.
func TestIndexStampedOutOfOrderHidesNothing(t *testing.T) {
	for _, early := range []int64{indexBase.Add(-2 * time.Hour).UnixNano(), math.MinInt64} {
		s, want := indexWith(t, nil)
		restampLast(t, s, early)
		for _, q := range []backend.FinishedQuery{{Since: indexBase}, {Limit: 2}, {Since: time.Unix(0, early).Add(time.Hour)}} {
			res := mustQuery(t, s, q)
			n := len(want)
			if q.Limit > 0 {
				n = q.Limit
			}
			if !slices.Equal(ids(res.Runs), want[:n]) || !strings.Contains(res.IndexProblem, "stamped out of order") {
				t.Errorf("stamp %d, query %+v: runs %v, problem %q; want %v", early, q, ids(res.Runs), res.IndexProblem, want[:n])
			}
		}
		rep, err := s.FinishIndex().CheckIndex(false)
		if err != nil || !rep.Rebuilt || !strings.Contains(rep.Why, "stamped out of order") || rep.Runs != 3 {
			t.Fatalf("CheckIndex = %+v, %v", rep, err)
		}
		res := mustQuery(t, s, backend.FinishedQuery{Since: indexBase})
		if !slices.Equal(ids(res.Runs), want) || res.IndexProblem != "" {
			t.Errorf("after the rebuild: runs %v, problem %q", ids(res.Runs), res.IndexProblem)
		}
		if rep, err := s.FinishIndex().CheckIndex(false); err != nil || rep.Rebuilt || rep.Added+rep.Changed+rep.Junk != 0 {
			t.Errorf("a second check: %+v, %v", rep, err)
		}
	}
}

// An append never stamps an entry earlier than the last one, whatever the
// clock says: the index stays in order across a clock set back.
func TestIndexAppendsStayInOrderWhenTheClockGoesBack(t *testing.T) {
	s, _ := indexWith(t, nil)
	ahead := time.Now().Add(time.Hour).UnixNano() // as if the clock was an hour ahead, then set right
	restampLast(t, s, ahead)
	finishAsSupervisor(t, s, storetest.Finished(indexBase, indexBase.Add(time.Hour), 7, "after", record.Succeeded))
	f, size, err := s.FinishIndex().OpenIndex()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, err := finishindex.ReadIndex(f, size)
	if err != nil {
		t.Fatal(err)
	}
	if last := entries[len(entries)-1]; last.Appended.UnixNano() < ahead || finishindex.OutOfOrder(entries) {
		t.Errorf("the new entry is stamped %v, before the last one's %v", last.Appended, time.Unix(0, ahead))
	}
}

// BenchmarkIndexJunkTail: status's newest 10 on an index of 1000 entries
// followed by a newline-less tail of junk; time and memory grow with the
// junk's size, linearly (compare the sizes' ns/op and B/op).
func BenchmarkIndexJunkTail(b *testing.B) {
	for _, mib := range []int{0, 1, 8, 64} {
		b.Run(fmt.Sprintf("junk=%dMiB", mib), func(b *testing.B) {
			s := newStore(b)
			var lines []byte
			for i := range 1000 {
				rec := storetest.Finished(indexBase, indexBase.Add(time.Duration(i)*time.Second), i, "t", record.Succeeded)
				data, err := rec.Encode()
				if err != nil {
					b.Fatal(err)
				}
				storetest.MkdirAll(b, osPath(s, shardDir(rec.RunID)))
				storetest.WriteString(b, s.DonePath(rec.RunID), string(data))
				lines = finishindex.EntryOf(rec, *rec.FinishedAt).Encode(lines)
			}
			appendRaw(b, s, append(lines, bytes.Repeat([]byte{'x'}, mib<<20)...))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.FinishIndex().FinishedRuns(backend.FinishedQuery{Limit: 10}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNthNewestFinish: what a lazy prune pays, when runs overlapped
// or waited in line, to prove the count rule's line from the index, with
// n finished runs of 12 an hour, each overlapping the next (so a stat for
// each of those created before the line), the done index warm as it is in
// use (its shards settled).
func BenchmarkNthNewestFinish(b *testing.B) {
	for _, n := range []int{20, 1000, 10000} {
		b.Run(fmt.Sprintf("retain=%d", n), func(b *testing.B) {
			s := newStore(b)
			for i := range n {
				created := indexBase.Add(time.Duration(i) * 5 * time.Minute)
				rec := storetest.Finished(created, created.Add(7*time.Minute), i, "t", record.Succeeded)
				data, err := rec.Encode()
				if err != nil {
					b.Fatal(err)
				}
				storetest.MkdirAll(b, osPath(s, shardDir(rec.RunID)))
				storetest.WriteString(b, s.DonePath(rec.RunID), string(data))
			}
			if _, err := s.FinishIndex().CheckIndex(false); err != nil {
				b.Fatal(err)
			}
			settleShards(b, s)
			b.ReportAllocs()
			for b.Loop() {
				x := s.FinishIndex().OpenDoneIndex(time.Now)
				_, ok, err := s.FinishIndex().NthNewestFinish(n, x)
				x.Save()
				x.Close()
				if !ok || err != nil {
					b.Fatalf("not proven: %v", err)
				}
			}
		})
	}
}

// settleShards backdates every shard's modification time, so that the
// done index remembers them (as it would once they are a few seconds old).
func settleShards(tb testing.TB, s *runstore.Store) {
	tb.Helper()
	done := osPath(s, "runs/done")
	shards, err := os.ReadDir(done)
	if err != nil {
		tb.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, sh := range shards {
		if err := os.Chtimes(done+"/"+sh.Name(), old, old); err != nil {
			tb.Fatal(err)
		}
	}
}
