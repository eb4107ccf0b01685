package runstore

import (
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

// A run whose log a waiter holds is not removed (ErrRunBusy), record and
// log alike, until the waiter lets go; a run being removed cannot be
// held; a run without a log has nothing to hold.
func TestHeldLogKeepsItsRun(t *testing.T) {
	s := newStore(t)
	rec := finishedRecord(indexBase, indexBase.Add(time.Minute), 1, "held", record.Succeeded)
	f, _, err := s.CreateLog(rec.RunID)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	finishAsSupervisor(t, s, rec)

	h, err := s.HoldLog(rec.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Current() {
		t.Fatal("the held log is not the run's log")
	}
	if err := s.RemoveFinished(rec.RunID); !errors.Is(err, ErrRunBusy) {
		t.Fatalf("RemoveFinished of a held run = %v, want ErrRunBusy", err)
	}
	assertExists(t, s.DonePath(rec.RunID))
	assertExists(t, s.LogPath(rec.RunID))
	h2, err := s.HoldLog(rec.RunID) // waiters share it
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	if err := s.RemoveFinished(rec.RunID); !errors.Is(err, ErrRunBusy) {
		t.Fatalf("RemoveFinished with one of two waiters left = %v, want ErrRunBusy", err)
	}
	h2.Release()
	h2.Release() // twice is harmless
	if err := s.RemoveFinished(rec.RunID); err != nil {
		t.Fatal(err)
	}
	assertMissing(t, s.DonePath(rec.RunID))
	assertMissing(t, s.LogPath(rec.RunID))
	if _, err := s.HoldLog(rec.RunID); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("HoldLog of a removed run = %v, want fs.ErrNotExist", err)
	}

	// While a prune holds the log to remove the run, a waiter cannot.
	other := finishedRecord(indexBase, indexBase.Add(2*time.Minute), 2, "other", record.Succeeded)
	f, _, err = s.CreateLog(other.RunID)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	held, err := s.lockLogToRemove(other.RunID)
	if err != nil || held == nil {
		t.Fatalf("lockLogToRemove = %v, %v", held, err)
	}
	if _, err := s.HoldLog(other.RunID); !errors.Is(err, ErrRunBusy) {
		t.Errorf("HoldLog during a removal = %v, want ErrRunBusy", err)
	}
	_ = held.Release()
}

// The index of finished runs tells a pruned run's end; a run it does not
// list, or lists as unreadable, it does not.
func TestIndexedEndOf(t *testing.T) {
	s := newStore(t)
	rec := finishedRecord(indexBase, indexBase.Add(time.Minute), 1, "gone", record.Failed)
	finishAsSupervisor(t, s, rec)
	if err := s.RemoveFinished(rec.RunID); err != nil {
		t.Fatal(err)
	}
	end, ok := s.IndexedEndOf(rec.RunID)
	if !ok || end.Task != "gone" || end.State != record.Failed || end.Exit == nil || *end.Exit != 2 || !end.Finished.Equal(*rec.FinishedAt) {
		t.Fatalf("IndexedEndOf = %+v, %v", end, ok)
	}
	if _, ok := s.IndexedEndOf(idAt(indexBase, 99)); ok {
		t.Error("a run the index does not list has an end")
	}
}
