package runstore

import (
	"os"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
)

// asRootOnly skips where the test cannot give a file to another user.
func asRootOnly(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("only root can give a file to another user")
	}
}

// A stop request says who wrote it as the kernel does: the file's owner,
// whatever its content claims; the supervisor's acknowledgement keeps who
// asked once the file is rewritten as the run's user.
func TestStopRequestCarriesItsFileOwner(t *testing.T) {
	asRootOnly(t)
	s := newStore(t)
	req := &record.StopRequest{PID: 1, User: "root", Signal: "SIGKILL", Signo: 9, At: time.Now()}
	if err := s.WriteStopRequest(testID, req); err != nil {
		t.Fatal(err)
	}
	got := s.ReadStopRequest(testID)
	if got == nil || got.FileUID == nil || *got.FileUID != 0 {
		t.Fatalf("ReadStopRequest = %+v, want FileUID 0", got)
	}
	if err := os.Chown(s.osPath(ownersDir, stopRequestName(testID)), 65534, -1); err != nil {
		t.Fatal(err)
	}
	got = s.ReadStopRequest(testID)
	if got == nil || got.FileUID == nil || *got.FileUID != 65534 {
		t.Fatalf("ReadStopRequest = %+v, want FileUID 65534 (the file's owner, not its \"user\": \"root\")", got)
	}
	if uid, ok := got.Requester(0); ok || uid != 65534 {
		t.Errorf("Requester(0) = %d, %v: uid 65534 may not stop root's run", uid, ok)
	}

	// The supervisor's own Pending sees the same owner.
	w, err := s.WatchStopRequests(testID)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p := w.Pending()
	if p == nil || p.FileUID == nil || *p.FileUID != 65534 {
		t.Fatalf("Pending = %+v, want FileUID 65534", p)
	}
	if w.Pending() != nil {
		t.Error("Pending returns each request file once")
	}
}

// RunUser and WaiterUser: whose a run and a waiting start are, from their
// lock files' owners; a run's lock file that is not the one its record
// names says nothing.
func TestRunAndWaiterUser(t *testing.T) {
	asRootOnly(t)
	s := newStore(t)
	a := lockAdmission(t, s)
	rec := testRecord(testID, record.Provisioning)
	l, err := a.Reserve(rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Release)
	ticket := idAt(time.Now(), 9)
	w, err := a.Enqueue(testTicket(ticket, "waiting"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Remove)
	a.Release()

	if uid, err := s.RunUser(testID, rec.Locks); err != nil || uid != 0 {
		t.Errorf("RunUser = %d, %v; want 0", uid, err)
	}
	if uid, err := s.WaiterUser(ticket); err != nil || uid != 0 {
		t.Errorf("WaiterUser = %d, %v; want 0", uid, err)
	}
	if err := os.Chown(s.osPath(ownersDir, ownerLockName(testID)), 65534, -1); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(s.osPath(queueDir, queue.LockName(ticket)), 65534, -1); err != nil {
		t.Fatal(err)
	}
	if uid, err := s.RunUser(testID, rec.Locks); err != nil || uid != 65534 {
		t.Errorf("RunUser = %d, %v; want 65534", uid, err)
	}
	if uid, err := s.WaiterUser(ticket); err != nil || uid != 65534 {
		t.Errorf("WaiterUser = %d, %v; want 65534", uid, err)
	}

	// A file put in the lock's place is not the run's.
	path := s.osPath(ownersDir, ownerLockName(testID))
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	writeString(t, path, "")
	if uid, err := s.RunUser(testID, rec.Locks); err == nil {
		t.Errorf("RunUser of a replaced lock file = %d, want an error", uid)
	}
	if uid, err := s.WaiterUser(idAt(time.Now(), 10)); err == nil {
		t.Errorf("WaiterUser of no ticket = %d, want an error", uid)
	}
}
