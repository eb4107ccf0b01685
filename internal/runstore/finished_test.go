package runstore

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

func walkAll(t *testing.T, s *Store) []record.RunID {
	t.Helper()
	var ids []record.RunID
	if err := s.FinishIndex().WalkFinished(func(id record.RunID) bool { ids = append(ids, id); return true }); err != nil {
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
