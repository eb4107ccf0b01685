package finishindex_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/finishindex"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/stateroot"
	"github.com/crew-dev/crew/internal/storetest"
)

func walkAll(t *testing.T, s *runstore.Store) []record.RunID {
	t.Helper()
	var ids []record.RunID
	if err := s.FinishIndex().WalkFinished(func(id record.RunID) bool { ids = append(ids, id); return true }); err != nil {
		t.Fatalf("WalkFinished = %v", err)
	}
	return ids
}

// WalkFinished goes newest first across shards and within each: shards
// by name (hours sort as text: "2024-01-10T.." after "2024-01-09T..", hour
// "10" after "09"), runs by id (creation time to the nanosecond, the
// random part breaking ties), whatever order the directories list them
// in. A shard larger than what is picked without sorting is walked in
// order too, past its first finishindex.WalkFirst runs.
func TestWalkFinishedNewestFirstAcrossShards(t *testing.T) {
	s := newStore(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var want []record.RunID
	hours := []time.Time{
		time.Date(2023, 12, 31, 23, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 9, 9, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 9, 10, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 10, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 10, 23, 0, 0, 0, time.UTC),
	}
	sizes := []int{1, 3, finishindex.WalkFirst + 37, finishindex.WalkFirst, 2}
	n := 0
	for i, h := range hours {
		for range sizes[i] {
			n++
			// Times spread over the hour, random parts not in time order,
			// and some runs created in the same nanosecond.
			at := h.Add(time.Duration(rng.Int64N(int64(time.Hour))))
			if n%10 == 0 {
				at = h.Add(30 * time.Minute)
			}
			id := storetest.IDAt(at, rng.IntN(1<<30))
			writeDoneFast(t, s, id)
			want = append(want, id)
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)
	slices.Reverse(want)

	got := walkAll(t, s)
	if !slices.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("WalkFinished differs at %d of %d/%d: got %s, want %s", i, len(got), len(want), got[i], want[i])
			}
		}
		t.Fatalf("WalkFinished returned %d ids, want %d", len(got), len(want))
	}

	// Stopping early stops at once, at every point.
	for _, stop := range []int{1, 2, 3, finishindex.WalkFirst, finishindex.WalkFirst + 1, finishindex.WalkFirst + 5, len(want) - 1} {
		var ids []record.RunID
		err := s.FinishIndex().WalkFinished(func(id record.RunID) bool { ids = append(ids, id); return len(ids) < stop })
		if err != nil || !slices.Equal(ids, want[:stop]) {
			t.Errorf("WalkFinished stopping after %d: %d ids (%v), want the %d newest", stop, len(ids), err, stop)
		}
	}
}

// Names in runs/done and its shards that are not shards or records are
// not walked: dot-files, temporary files, foreign names.
func TestWalkFinishedSkipsWhatIsNotARecord(t *testing.T) {
	s := newStore(t)
	id := storetest.IDAt(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), 1)
	writeDone(t, s, storetest.Record(id, record.Succeeded))
	storetest.MkdirAll(t, osPath(s, "runs/done", ".9999-12-31T00"))
	storetest.WriteString(t, osPath(s, "runs/done", ".9999-12-31T00", string(storetest.IDAt(time.Now(), 2))+".json"), "{}")
	storetest.WriteString(t, osPath(s, shardDir(id), "."+stateroot.RecordName(id)+"0123456789abcdef"), "{torn")
	storetest.WriteString(t, osPath(s, shardDir(id), "notes.txt"), "")
	storetest.WriteString(t, osPath(s, shardDir(id), "r-bad.json"), "")
	storetest.WriteString(t, osPath(s, shardDir(id), string(id)), "")
	if got := walkAll(t, s); !slices.Equal(got, []record.RunID{id}) {
		t.Errorf("WalkFinished = %q, want only %s", got, id)
	}
}

// A shard removed while the walk is under way (crew prune) is skipped.
func TestWalkFinishedShardPrunedMeanwhile(t *testing.T) {
	s := newStore(t)
	newer := storetest.IDAt(time.Date(2024, 1, 2, 5, 0, 0, 0, time.UTC), 1)
	older := storetest.IDAt(time.Date(2024, 1, 2, 4, 0, 0, 0, time.UTC), 2)
	writeDone(t, s, storetest.Record(newer, record.Succeeded))
	writeDone(t, s, storetest.Record(older, record.Succeeded))
	var ids []record.RunID
	err := s.FinishIndex().WalkFinished(func(id record.RunID) bool {
		ids = append(ids, id)
		if id == newer {
			if err := os.RemoveAll(osPath(s, shardDir(older))); err != nil {
				t.Error(err) // the callback runs on the test goroutine
			}
		}
		return true
	})
	if err != nil || !slices.Equal(ids, []record.RunID{newer}) {
		t.Errorf("WalkFinished with a shard pruned meanwhile = %q, %v; want only %s", ids, err, newer)
	}
}

func TestNewestN(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, size := range []int{0, 1, 5, 64, 65, 200} {
		names := make([]string, size)
		for i := range names {
			names[i] = fmt.Sprintf("%06d", rng.IntN(500)) // with duplicates
		}
		sorted := slices.Sorted(slices.Values(names))
		slices.Reverse(sorted)
		for _, k := range []int{1, 3, 64, size, size + 1} {
			in := slices.Clone(names)
			got := finishindex.NewestN(in, k)
			if want := sorted[:min(k, size)]; !slices.Equal(got, want) {
				t.Errorf("finishindex.NewestN(%d names, %d) = %v, want %v", size, k, got, want)
			}
			if !slices.Equal(in, names) {
				t.Errorf("finishindex.NewestN(%d names, %d) changed its input", size, k)
			}
		}
	}
}

// finishedFixture writes finished runs over several days, out of order,
// and returns their ids newest first.
func finishedFixture(t *testing.T, s *runstore.Store) []record.RunID {
	t.Helper()
	days := []time.Time{
		time.Date(2023, 12, 31, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 10, 0, 0, 0, 0, time.UTC), // "2024-01-10" sorts after "2024-01-09"
		time.Date(2024, 1, 9, 0, 0, 0, 0, time.UTC),
	}
	var ids []record.RunID
	n := 0
	for _, d := range days {
		for _, off := range []time.Duration{23*time.Hour + 59*time.Minute, time.Second, 9 * time.Hour, 10 * time.Hour} {
			n++
			id := storetest.IDAt(d.Add(off), 1000-n) // random part deliberately not in time order
			rec := storetest.Record(id, record.Succeeded)
			if n%2 == 0 {
				rec.Task = "even"
			}
			writeDone(t, s, rec)
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids
}

func recIDs(recs []*record.Run) []record.RunID {
	var out []record.RunID
	for _, r := range recs {
		out = append(out, r.RunID)
	}
	return out
}

func TestRecentFinishedNewestFirstAcrossShards(t *testing.T) {
	s := newStore(t)
	want := finishedFixture(t, s)
	// Distractions that are not records.
	storetest.WriteString(t, osPath(s, "runs/done", "README"), "not a shard")
	storetest.MkdirAll(t, osPath(s, "runs/done", ".9999-12-31T00"))
	storetest.WriteString(t, osPath(s, "runs/done", ".9999-12-31T00", string(storetest.IDAt(time.Now(), 1))+".json"), "{}")
	newest := shardDir(want[0])
	storetest.WriteString(t, osPath(s, newest, "."+string(want[0])+".json987654"), "{torn")
	storetest.WriteString(t, osPath(s, newest, "notes.txt"), "hello")

	for _, n := range []int{1, 3, 4, 5, 9, len(want), len(want) + 10} {
		recs, bad, err := s.FinishIndex().RecentFinished(n, nil)
		if err != nil || len(bad) != 0 {
			t.Fatalf("RecentFinished(%d) err %v bad %v", n, err, bad)
		}
		wantN := want[:min(n, len(want))]
		if got := recIDs(recs); !slices.Equal(got, wantN) {
			t.Errorf("RecentFinished(%d) =\n%q\nwant\n%q", n, got, wantN)
		}
	}
	recs, bad, err := s.FinishIndex().RecentFinished(0, nil)
	if err != nil || len(recs) != 0 || len(bad) != 0 {
		t.Errorf("RecentFinished(0) = %v, %v, %v", recs, bad, err)
	}
}

func TestRecentFinishedFilter(t *testing.T) {
	s := newStore(t)
	all := finishedFixture(t, s)
	var even []record.RunID
	for _, id := range all {
		rec, err := s.ReadRun(id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Task == "even" {
			even = append(even, id)
		}
	}
	keep := func(r *record.Run) bool { return r.Task == "even" }
	for _, n := range []int{1, 3, len(even), len(even) + 1} {
		recs, bad, err := s.FinishIndex().RecentFinished(n, keep)
		if err != nil || len(bad) != 0 {
			t.Fatalf("err %v bad %v", err, bad)
		}
		if got, want := recIDs(recs), even[:min(n, len(even))]; !slices.Equal(got, want) {
			t.Errorf("RecentFinished(%d, even) =\n%q\nwant\n%q", n, got, want)
		}
	}
	recs, _, _ := s.FinishIndex().RecentFinished(10, func(*record.Run) bool { return false })
	if len(recs) != 0 {
		t.Errorf("keep=false returned %d records", len(recs))
	}
}

func TestRecentFinishedReportsBadRecords(t *testing.T) {
	s := newStore(t)
	ids := finishedFixture(t, s)
	// Corrupt the second newest and the fourth newest.
	storetest.WriteString(t, s.DonePath(ids[1]), "")
	storetest.WriteString(t, s.DonePath(ids[3]), `{"version":2}`)

	recs, bad, err := s.FinishIndex().RecentFinished(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := recIDs(recs), []record.RunID{ids[0], ids[2], ids[4]}; !slices.Equal(got, want) {
		t.Errorf("RecentFinished(3) = %q, want %q (bad ones skipped, not counted)", got, want)
	}
	if len(bad) != 2 {
		t.Fatalf("bad = %v, want 2 errors", bad)
	}
	for i, idx := range []int{1, 3} {
		if !strings.Contains(bad[i].Error(), s.DonePath(ids[idx])) {
			t.Errorf("bad[%d] = %q, want it to name %s", i, bad[i], s.DonePath(ids[idx]))
		}
	}
}

func TestRecentFinishedReadsOnlyWhatItNeeds(t *testing.T) {
	// Its cost follows how far back it must look: a corrupt record in an
	// older shard is never read when the newest shards have enough.
	s := newStore(t)
	ids := finishedFixture(t, s)
	oldest := ids[len(ids)-1]
	storetest.WriteString(t, s.DonePath(oldest), "corrupt")
	recs, bad, err := s.FinishIndex().RecentFinished(2, nil)
	if err != nil || len(bad) != 0 || len(recs) != 2 {
		t.Fatalf("RecentFinished(2) = %d recs, bad %v, err %v; the oldest shard should not be read", len(recs), bad, err)
	}
	_, bad, _ = s.FinishIndex().RecentFinished(len(ids), nil)
	if len(bad) != 1 {
		t.Errorf("reading everything: bad = %v, want the one corrupt record", bad)
	}
}

func TestRecentFinishedNoDoneDir(t *testing.T) {
	recs, bad, err := runstore.New(filepath.Join(t.TempDir(), "none")).FinishIndex().RecentFinished(5, nil)
	if recs != nil || bad != nil || err != nil {
		t.Fatalf("RecentFinished(no root) = %v, %v, %v", recs, bad, err)
	}
}
