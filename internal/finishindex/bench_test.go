package finishindex_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/finishindex"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/storetest"
)

// BenchmarkIndexAppend is what the index costs every run's finish: one
// entry appended (open, shared flock, check, write, close), measured on
// an index that already lists 0 or 100,000 runs. Compare it with
// BenchmarkFinish, the whole finalization it is part of.
func BenchmarkIndexAppend(b *testing.B) {
	for _, history := range []int{0, 100000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			s := newStore(b)
			rec := storetest.Record(storetest.IDAt(indexBase, 1), record.Succeeded)
			if history > 0 {
				var lines []byte
				for i := range history {
					e := finishindex.EntryOf(storetest.Record(storetest.IDAt(indexBase.Add(time.Duration(i)), i), record.Succeeded), indexBase)
					lines = e.Encode(lines)
				}
				f, err := os.OpenFile(s.FinishIndex().IndexPath(), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.Write(lines); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
			b.ReportAllocs()
			for b.Loop() {
				if !s.FinishIndex().Append(rec) {
					b.Fatal("append failed")
				}
			}
		})
	}
}

// BenchmarkFinish is a run's whole finalization by its supervisor (final
// record written durably, index entry, active file and locks removed),
// for scale against BenchmarkIndexAppend.
func BenchmarkFinish(b *testing.B) {
	s := newStore(b)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		id := storetest.IDAt(indexBase.Add(time.Duration(i)), i)
		b.StopTimer()
		a, err := s.LockAdmission(b.Context(), 5*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		l, err := a.Reserve(storetest.Record(id, record.Provisioning))
		a.Release()
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := l.Finish(storetest.Record(id, record.Succeeded)); err != nil {
			b.Fatal(err)
		}
	}
}

// historyStore is a state root with n finished runs created within one
// hour (the worst case: one shard), finished in creation order, one in
// 1000 of task "rare" and one in 100 failed, written directly (no fsync)
// and then indexed as crew recover indexes a history it did not write.
func historyStore(b *testing.B, n int) *runstore.Store {
	s := newStore(b)
	storetest.MkdirAll(b, osPath(s, shardDir(storetest.IDAt(indexBase, 0))))
	for i := range n {
		created := indexBase.Add(time.Duration(i) * (time.Hour / time.Duration(n+1)))
		task, state := "build", record.Succeeded
		if i%1000 == 7 {
			task = "rare"
		}
		if i%100 == 3 {
			state = record.Failed
		}
		rec := storetest.Finished(created, created.Add(time.Second), i, task, state)
		data, err := rec.Encode()
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(s.DonePath(rec.RunID), data, runstore.FilePerm); err != nil {
			b.Fatal(err)
		}
	}
	if rep, err := s.FinishIndex().CheckIndex(false); err != nil || rep.Runs != n {
		b.Fatalf("CheckIndex = %+v, %v", rep, err)
	}
	return s
}

// BenchmarkFinishedRuns: the queries of crew status and crew history on
// 100,000 finished runs created in one hour, with the index and (the
// newest 10 only) without it.
func BenchmarkFinishedRuns(b *testing.B) {
	const n = 100000
	s := historyStore(b, n)
	last := indexBase.Add(time.Hour)
	queries := []struct {
		name string
		q    backend.FinishedQuery
		want int
	}{
		{"status-newest-10", backend.FinishedQuery{Limit: 10}, 10},
		{"history-newest-20", backend.FinishedQuery{Limit: 20}, 20},
		{"history-task-rare-20", backend.FinishedQuery{Limit: 20, Match: func(t string, _ record.State, _ *int) bool { return t == "rare" }}, 20},
		{"history-task-absent", backend.FinishedQuery{Limit: 20, Match: func(t string, _ record.State, _ *int) bool { return t == "absent" }}, 0},
		{"history-failed-20", backend.FinishedQuery{Limit: 20, Match: func(_ string, st record.State, _ *int) bool { return st != record.Succeeded }}, 20},
		{"history-since-1m", backend.FinishedQuery{Since: last.Add(-time.Minute)}, n/60 + n/3600 + 1},
	}
	for _, c := range queries {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := s.FinishIndex().FinishedRuns(c.q)
				if err != nil || res.Unindexed != "" || len(res.Runs) < c.want-2 || len(res.Runs) > c.want+2 {
					b.Fatalf("%d runs, unindexed %q, %v", len(res.Runs), res.Unindexed, err)
				}
			}
		})
	}
	// What a compaction of this index costs (the finisher whose append
	// takes the file across a power of two pays it, after its locks are
	// gone): every entry parsed, every record's file checked. One entry of
	// a pruned run is added each time so there is something to drop.
	b.Run("compact", func(b *testing.B) {
		dir, err := s.FinishIndex().OpenRuns()
		if err != nil {
			b.Fatal(err)
		}
		defer dir.Close()
		ghost := storetest.Finished(indexBase.Add(-time.Hour), indexBase, 1, "ghost", record.Succeeded)
		for b.Loop() {
			b.StopTimer()
			if ok, _ := s.FinishIndex().AppendFinished(dir, []finishindex.FinishedEntry{finishindex.EntryOf(ghost, time.Time{})}); !ok {
				b.Fatal("append failed")
			}
			b.StartTimer()
			if dropped, err := s.FinishIndex().CompactIndex(); err != nil || dropped != 1 {
				b.Fatalf("CompactIndex = %d, %v", dropped, err)
			}
		}
	})
	// Without the index, status lists the newest-created runs; the exact
	// answer from the records costs a read of every record whose file is
	// as new as the newest finishes: here, written all at once, all of
	// them (crew recover builds the index).
	for _, approximate := range []bool{true, false} {
		b.Run(fmt.Sprintf("newest-10-without-index/approximate=%v", approximate), func(b *testing.B) {
			if err := os.Rename(s.FinishIndex().IndexPath(), s.FinishIndex().IndexPath()+".away"); err != nil {
				b.Fatal(err)
			}
			defer os.Rename(s.FinishIndex().IndexPath()+".away", s.FinishIndex().IndexPath())
			b.ReportAllocs()
			for b.Loop() {
				res, err := s.FinishIndex().FinishedRuns(backend.FinishedQuery{Limit: 10, Approximate: approximate})
				if err != nil || res.Unindexed == "" || len(res.Runs) != 10 {
					b.Fatalf("%d runs, unindexed %q, %v", len(res.Runs), res.Unindexed, err)
				}
			}
		})
	}
}
