package queue_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/storetest"
)

// inherit is what a child inherits of f at exec: another descriptor of the
// same open file description.
func inherit(t *testing.T, f *os.File) *os.File {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	var derr error
	if err := rc.Control(func(d uintptr) { fd, derr = unix.Dup(int(d)) }); err != nil || derr != nil {
		t.Fatalf("dup %s: %v %v", f.Name(), err, derr)
	}
	return os.NewFile(uintptr(fd), f.Name())
}

// A place in line handed over (crew start --detach --wait): the adopter
// holds it once the start lets go of it (Release), is rung through the
// same bell, and removes the ticket when it leaves.
func TestWaiterHandOver(t *testing.T) {
	s := newStore(t)
	id := storetest.IDAt(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), 1)
	w := enqueue(t, s, id, "t")
	files := w.Files()
	if len(files) != 2 {
		t.Fatalf("Files() = %d files, want the lock and the bell", len(files))
	}
	adopted, err := s.Queue().AdoptWaiter(id, inherit(t, files[0]), inherit(t, files[1]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adopted.Remove)
	w.Release()
	if got := s.Queue().WaiterState(id); got != record.Alive || !s.Queue().HasTicket(id) {
		t.Fatalf("after the start let go: WaiterState %v, HasTicket %v; want the adopter to hold the place", got, s.Queue().HasTicket(id))
	}
	s.Queue().Ring(id)
	waitRung(t, adopted)
	adopted.Remove()
	if s.Queue().HasTicket(id) || s.Queue().WaiterState(id) != record.Dead {
		t.Errorf("after the adopter left: HasTicket %v, WaiterState %v", s.Queue().HasTicket(id), s.Queue().WaiterState(id))
	}
	storetest.AssertOnlyFiles(t, osPath(s, "queue"))
}

// An adopter refuses descriptors that are not the place's files (its
// bell replaced meanwhile), or a place whose ticket is gone.
func TestAdoptWaiterRefuses(t *testing.T) {
	s := newStore(t)
	id := storetest.IDAt(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), 1)
	w := enqueue(t, s, id, "t")
	files := w.Files()
	other, err := os.CreateTemp(t.TempDir(), "not-the-bell")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = s.Queue().AdoptWaiter(id, inherit(t, files[0]), other)
	if err == nil || !strings.Contains(err.Error(), "take over the place in line of "+string(id)+": inherited descriptor") ||
		!strings.HasSuffix(err.Error(), "is not "+queue.BellName(id)) {
		t.Errorf("AdoptWaiter with another file as the bell: %v", err)
	}
	lock, bell := inherit(t, files[0]), inherit(t, files[1])
	defer lock.Close()
	defer bell.Close()
	w.Remove()
	_, err = s.Queue().AdoptWaiter(id, lock, bell)
	if err == nil || !strings.Contains(err.Error(), "take over the place in line of "+string(id)+": its ticket:") {
		t.Errorf("AdoptWaiter of a place whose ticket is gone: %v", err)
	}
}
