package runstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

func walkAll(t *testing.T, s *Store) []record.RunID {
	t.Helper()
	var ids []record.RunID
	if err := s.WalkFinished(func(id record.RunID) bool { ids = append(ids, id); return true }); err != nil {
		t.Fatalf("WalkFinished = %v", err)
	}
	return ids
}

// writeDoneFast writes a finished record without fsyncs, for big fixtures.
func writeDoneFast(t *testing.T, s *Store, id record.RunID) {
	t.Helper()
	b, err := testRecord(id, record.Succeeded).Encode()
	if err != nil {
		t.Fatal(err)
	}
	mkdirAll(t, s.osPath(shardDir(id)))
	writeString(t, s.DonePath(id), string(b))
}

// WalkFinished goes newest first across shards and within each: shards
// by name (hours sort as text: "2024-01-10T.." after "2024-01-09T..", hour
// "10" after "09"), runs by id (creation time to the nanosecond, the
// random part breaking ties), whatever order the directories list them
// in. A shard larger than what is picked without sorting is walked in
// order too, past its first walkFirst runs.
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
	sizes := []int{1, 3, walkFirst + 37, walkFirst, 2}
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
			id := idAt(at, rng.IntN(1<<30))
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
	for _, stop := range []int{1, 2, 3, walkFirst, walkFirst + 1, walkFirst + 5, len(want) - 1} {
		var ids []record.RunID
		err := s.WalkFinished(func(id record.RunID) bool { ids = append(ids, id); return len(ids) < stop })
		if err != nil || !slices.Equal(ids, want[:stop]) {
			t.Errorf("WalkFinished stopping after %d: %d ids (%v), want the %d newest", stop, len(ids), err, stop)
		}
	}
}

// Names in runs/done and its shards that are not shards or records are
// not walked: dot-files, temporary files, foreign names.
func TestWalkFinishedSkipsWhatIsNotARecord(t *testing.T) {
	s := newStore(t)
	id := idAt(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), 1)
	mustWriteDone(t, s, testRecord(id, record.Succeeded))
	mkdirAll(t, s.osPath(doneDir, ".9999-12-31T00"))
	writeString(t, s.osPath(doneDir, ".9999-12-31T00", string(idAt(time.Now(), 2))+".json"), "{}")
	writeString(t, s.osPath(shardDir(id), "."+recordName(id)+"0123456789abcdef"), "{torn")
	writeString(t, s.osPath(shardDir(id), "notes.txt"), "")
	writeString(t, s.osPath(shardDir(id), "r-bad.json"), "")
	writeString(t, s.osPath(shardDir(id), string(id)), "")
	if got := walkAll(t, s); !slices.Equal(got, []record.RunID{id}) {
		t.Errorf("WalkFinished = %q, want only %s", got, id)
	}
}

// A shard removed while the walk is under way (crew prune) is skipped.
func TestWalkFinishedShardPrunedMeanwhile(t *testing.T) {
	s := newStore(t)
	newer := idAt(time.Date(2024, 1, 2, 5, 0, 0, 0, time.UTC), 1)
	older := idAt(time.Date(2024, 1, 2, 4, 0, 0, 0, time.UTC), 2)
	mustWriteDone(t, s, testRecord(newer, record.Succeeded))
	mustWriteDone(t, s, testRecord(older, record.Succeeded))
	var ids []record.RunID
	err := s.WalkFinished(func(id record.RunID) bool {
		ids = append(ids, id)
		if id == newer {
			if err := os.RemoveAll(s.osPath(shardDir(older))); err != nil {
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
			got := newestN(in, k)
			if want := sorted[:min(k, size)]; !slices.Equal(got, want) {
				t.Errorf("newestN(%d names, %d) = %v, want %v", size, k, got, want)
			}
			if !slices.Equal(in, names) {
				t.Errorf("newestN(%d names, %d) changed its input", size, k)
			}
		}
	}
}

func TestRemoveFinished(t *testing.T) {
	s := newStore(t)
	hour := time.Date(2024, 1, 2, 3, 0, 0, 0, time.UTC)
	a, b := idAt(hour, 1), idAt(hour.Add(time.Minute), 2)
	for _, id := range []record.RunID{a, b} {
		mustWriteDone(t, s, testRecord(id, record.Succeeded))
		writeString(t, s.Logs().LogPath(id), "some output")
	}
	if size := s.FinishedSize(a); size != int64(len("some output"))+fileSize(t, s.DonePath(a)) {
		t.Errorf("FinishedSize = %d", size)
	}
	// A finalization cut short (its active file still there) is not touched.
	mustWriteActive(t, s, testRecord(b, record.Running))
	if err := s.RemoveFinished(b); !errors.Is(err, ErrRunBusy) {
		t.Errorf("RemoveFinished(run still in the active set) = %v, want ErrRunBusy", err)
	}
	assertExists(t, s.DonePath(b))
	assertExists(t, s.Logs().LogPath(b))

	if err := s.RemoveFinished(a); err != nil {
		t.Fatal(err)
	}
	assertMissing(t, s.DonePath(a))
	assertMissing(t, s.Logs().LogPath(a))
	if s.IsDone(a) {
		t.Error("IsDone after RemoveFinished")
	}
	if err := s.RemoveFinished(a); err != nil {
		t.Errorf("RemoveFinished twice = %v", err)
	}
	// The shard still holds b: it stays.
	s.RemoveShardIfEmpty(a.Shard())
	assertExists(t, s.osPath(shardDir(b)))

	if err := s.removeActive(b); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveFinished(b); err != nil {
		t.Fatal(err)
	}
	s.RemoveShardIfEmpty(b.Shard())
	assertMissing(t, s.osPath(shardDir(b)))
	assertOnlyFiles(t, s.osPath(logsDir))
	// A run finishing into the removed shard makes it again.
	c := idAt(hour.Add(2*time.Minute), 3)
	mustWriteDone(t, s, testRecord(c, record.Succeeded))
	if got := walkAll(t, s); !slices.Equal(got, []record.RunID{c}) {
		t.Errorf("WalkFinished after the shard was removed and made again = %q", got)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Shards come and go under a long-lived store (crew prune in another
// process removes empty ones; the next run to finish in that hour makes
// the shard again). A store that had opened the old shard must see the
// runs finished into the new one: crew wait polls ReadRun with one store
// for as long as the run lasts.
func TestFinishedRunsInAShardRecreatedByAnotherProcess(t *testing.T) {
	s := newStore(t)
	hour := time.Date(2024, 1, 2, 3, 0, 0, 0, time.UTC)
	old, waited := idAt(hour, 1), idAt(hour.Add(time.Minute), 2)
	mustWriteDone(t, s, testRecord(old, record.Succeeded))
	mustWriteActive(t, s, testRecord(waited, record.Running))
	if rec, err := s.ReadRun(waited); err != nil || rec.State != record.Running {
		t.Fatalf("ReadRun = %+v, %v", rec, err)
	}

	pruner := New(s.Root())
	defer pruner.Close()
	if err := pruner.RemoveFinished(old); err != nil {
		t.Fatal(err)
	}
	pruner.RemoveShardIfEmpty(old.Shard())
	assertMissing(t, s.osPath(shardDir(old)))

	finisher := New(s.Root())
	defer finisher.Close()
	if err := finisher.finish(testRecord(waited, record.Succeeded)); err != nil {
		t.Fatal(err)
	}

	if !s.IsDone(waited) {
		t.Error("IsDone = false for a run finished into a shard made again after this store had opened it")
	}
	if rec, err := s.ReadRun(waited); err != nil || rec.State != record.Succeeded {
		t.Errorf("ReadRun = %+v, %v; want the finished record", rec, err)
	}
	if got := walkAll(t, s); !slices.Equal(got, []record.RunID{waited}) {
		t.Errorf("WalkFinished = %q, want %s", got, waited)
	}
}
