package localstore_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/localstore"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/storetest"
)

// enqueue puts a start of task in line as id, through the store's own
// admission section.
func enqueue(t *testing.T, s *localstore.Store, id record.RunID) backend.Waiter {
	t.Helper()
	st, err := s.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sec, err := st.LockAdmission(context.Background(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Release()
	w, err := sec.Enqueue(storetest.Ticket(id, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Remove)
	return w
}

// neverRan is the final record of a start that left the line without a
// run.
func neverRan(id record.RunID) *record.Run {
	at, _ := id.CreatedAt()
	rec := &record.Run{Version: record.RecordVersion, RunID: id, Task: "t", Command: []string{"true"}, Dir: "/",
		Host: "h", CreatedAt: at, QueuedAt: &at, NeverAdmitted: true}
	exit := 75
	rec.Finish(record.Failed, at.Add(time.Second), &exit, "not admitted: gave up")
	return rec
}

// A background waiter that leaves the line without a run leaves its
// record among the finished runs before its ticket goes.
func TestLeaveWith(t *testing.T) {
	s := storetest.Ensured(t, localstore.New(storetest.RootPath(t)))
	id := storetest.IDAt(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), 1)
	w := enqueue(t, s, id)
	if err := w.LeaveWith(neverRan(id)); err != nil {
		t.Fatal(err)
	}
	if s.Queue().HasTicket(id) || s.Queue().WaiterState(id) != record.Dead {
		t.Errorf("after LeaveWith: HasTicket %v, WaiterState %v", s.Queue().HasTicket(id), s.Queue().WaiterState(id))
	}
	rec, err := s.Runs().ReadRun(id)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.NeverAdmitted || rec.State != record.Failed || rec.ExitCode == nil || *rec.ExitCode != 75 {
		t.Errorf("record = %+v", rec)
	}
}

// Only the final record of a start that never ran goes in that way.
func TestRecordNeverAdmittedRefusesARun(t *testing.T) {
	s := storetest.Ensured(t, runstore.New(storetest.RootPath(t)))
	id := storetest.IDAt(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), 1)
	rec := neverRan(id)
	rec.NeverAdmitted = false
	err := s.RecordNeverAdmitted(rec)
	if err == nil || err.Error() != "run "+string(id)+": not the final record of a start that never ran" {
		t.Errorf("RecordNeverAdmitted of a run's record: %v", err)
	}
}

// AdoptWaiter takes exactly the lock and the bell.
func TestAdoptWaiterWantsTwoFiles(t *testing.T) {
	s := storetest.Ensured(t, localstore.New(storetest.RootPath(t)))
	id := storetest.IDAt(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), 1)
	_, _, err := s.AdoptWaiter(id, nil, []*os.File{os.Stdin})
	if err == nil || !strings.Contains(err.Error(), "1 descriptors handed over, want its lock and its bell") {
		t.Errorf("AdoptWaiter with one file: %v", err)
	}
}

// HandOver names the state root and hands on the lock and the bell.
func TestWaiterHandOverNamesTheRoot(t *testing.T) {
	s := storetest.Ensured(t, localstore.New(storetest.RootPath(t)))
	id := storetest.IDAt(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), 1)
	h := enqueue(t, s, id).HandOver()
	if len(h.Store) != 2 || h.Store[0] != "--root" || h.Store[1] != s.Root() || len(h.Files) != 2 || len(h.Adopt) != 0 {
		t.Errorf("HandOver() = %+v", h)
	}
}
