package runlog_test

import (
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runlog"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/storetest"
)

// A run whose log a waiter holds is not removed (runstore.ErrRunBusy),
// record and log alike, until the waiter lets go; a run being removed cannot be
// held; a run without a log has nothing to hold.
func TestHeldLogKeepsItsRun(t *testing.T) {
	s := newStore(t)
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	rec := storetest.Finished(base, base.Add(time.Minute), 1, "held", record.Succeeded)
	f, _, err := s.Logs().CreateLog(rec.RunID)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	writeDone(t, s, rec)

	h, err := s.Logs().HoldLog(rec.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Current() {
		t.Fatal("the held log is not the run's log")
	}
	if err := s.RemoveFinished(rec.RunID); !errors.Is(err, runstore.ErrRunBusy) {
		t.Fatalf("RemoveFinished of a held run = %v, want ErrRunBusy", err)
	}
	storetest.AssertExists(t, s.DonePath(rec.RunID))
	storetest.AssertExists(t, s.Logs().LogPath(rec.RunID))
	h2, err := s.Logs().HoldLog(rec.RunID) // waiters share it
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	if err := s.RemoveFinished(rec.RunID); !errors.Is(err, runstore.ErrRunBusy) {
		t.Fatalf("RemoveFinished with one of two waiters left = %v, want ErrRunBusy", err)
	}
	h2.Release()
	h2.Release() // twice is harmless
	if err := s.RemoveFinished(rec.RunID); err != nil {
		t.Fatal(err)
	}
	storetest.AssertMissing(t, s.DonePath(rec.RunID))
	storetest.AssertMissing(t, s.Logs().LogPath(rec.RunID))
	if _, err := s.Logs().HoldLog(rec.RunID); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("HoldLog of a removed run = %v, want fs.ErrNotExist", err)
	}

	// While a prune holds the log to remove the run, a waiter cannot.
	other := storetest.Finished(base, base.Add(2*time.Minute), 2, "other", record.Succeeded)
	f, _, err = s.Logs().CreateLog(other.RunID)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	held, err := s.Logs().LockToRemove(other.RunID)
	if err != nil || held == nil {
		t.Fatalf("LockToRemove = %v, %v", held, err)
	}
	if _, err := s.Logs().HoldLog(other.RunID); !errors.Is(err, runlog.ErrBusy) {
		t.Errorf("HoldLog during a removal = %v, want ErrBusy", err)
	}
	_ = held.Release()
}
