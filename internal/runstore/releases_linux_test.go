//go:build linux

package runstore

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"golang.org/x/sys/unix"
)

// event is one inotify event as the kernel writes it.
func event(wd int32, mask uint32, name string) []byte {
	n := (len(name) + 1 + 15) / 16 * 16 // padded, NUL-terminated
	b := make([]byte, unix.SizeofInotifyEvent+n)
	binary.NativeEndian.PutUint32(b[0:], uint32(wd))
	binary.NativeEndian.PutUint32(b[4:], mask)
	binary.NativeEndian.PutUint32(b[12:], uint32(n))
	copy(b[unix.SizeofInotifyEvent:], name)
	return b
}

// What wakes a waiter: a lock file of owners/ that its last writer closed
// and that is still there (its holders died), unless it is an owner lock
// whose supervisor lives (it finishes the run and rings), crew.json
// replaced, a lost event; not a lock file removed before it was let go (a
// normal end), nor anything else.
func TestReleasesThatMatter(t *testing.T) {
	s := newStore(t)
	owners, err := s.dir(ownersDir)
	if err != nil {
		t.Fatal(err)
	}
	defer owners.Close()
	if err := os.WriteFile(filepath.Join(s.Root(), ownersDir, "r-dead.lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// r-live's supervisor lives (holds its lock): it let go of the owner
	// lock to take it again and finish; r-orphan's supervisor is gone.
	for _, name := range []string{"r-live.lock", "r-live.supervisor.lock", "r-orphan.lock", "r-orphan.supervisor.lock"} {
		if err := os.WriteFile(filepath.Join(s.Root(), ownersDir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	supervisor, err := os.Open(filepath.Join(s.Root(), ownersDir, "r-live.supervisor.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer supervisor.Close()
	if err := unix.Flock(int(supervisor.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	r := &releases{owners: owners}
	r.ownersWD.Store(1)
	for _, c := range []struct {
		name  string
		batch []byte
		want  bool
	}{
		{"a lock left by the dead", event(1, unix.IN_CLOSE_WRITE, "r-dead.lock"), true},
		{"a lock removed first", event(1, unix.IN_CLOSE_WRITE, "r-gone.lock"), false},
		{"an owner lock let go by a living supervisor", event(1, unix.IN_CLOSE_WRITE, "r-live.lock"), false},
		{"an owner lock let go after its supervisor died", event(1, unix.IN_CLOSE_WRITE, "r-orphan.lock"), true},
		{"a supervisor lock left by the dead", event(1, unix.IN_CLOSE_WRITE, "r-orphan.supervisor.lock"), true},
		{"a stop request", event(1, unix.IN_CLOSE_WRITE, "r-dead.stop"), false},
		{"crew.json replaced", event(2, unix.IN_MOVED_TO, configName), true},
		{"crew.json written in place", event(2, unix.IN_CLOSE_WRITE, configName), true},
		{"another file of the root", event(2, unix.IN_MOVED_TO, "refusals.log"), false},
		{"lost events", event(-1, unix.IN_Q_OVERFLOW, ""), true},
		{"one that matters after one that does not", append(event(1, unix.IN_CLOSE_WRITE, "r-gone.lock"), event(1, unix.IN_CLOSE_WRITE, "r-dead.lock")...), true},
		{"a torn batch", event(1, unix.IN_CLOSE_WRITE, "r-gone.lock")[:unix.SizeofInotifyEvent+3], true},
	} {
		if got := r.matters(c.batch); got != c.want {
			t.Errorf("%s: matters = %v, want %v", c.name, got, c.want)
		}
	}
}

// The watch itself: a lock file closed by its last writer while in place
// wakes it.
func TestWatchReleases(t *testing.T) {
	s := newStore(t)
	w, err := s.WatchReleases("")
	if err != nil {
		t.Skipf("no inotify here: %v", err)
	}
	defer w.Close()
	f, err := os.OpenFile(filepath.Join(s.Root(), ownersDir, "r-x.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	select {
	case <-w.C:
	case <-time.After(10 * time.Second):
		t.Fatal("a lock file closed in place did not wake the watch")
	}
}

// The kernel tells of a close before it lets go of the closed file's
// flocks: a waiter told at once that the last of a dead run's locks was
// closed may still find that lock held (by the dying process, for a
// moment), decide no slot is free, and hear nothing more until the 30 s
// poll. So a release is told again, later, without another event.
func TestAReleaseIsToldAgain(t *testing.T) {
	s := newStore(t)
	owners, err := s.dir(ownersDir)
	if err != nil {
		t.Fatal(err)
	}
	defer owners.Close()
	if err := os.WriteFile(filepath.Join(s.Root(), ownersDir, "r-dying.lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := make(chan struct{}, 1)
	r := &releases{owners: owners, c: c}
	r.ownersWD.Store(1)
	if !r.matters(event(1, unix.IN_CLOSE_WRITE, "r-dying.lock")) {
		t.Fatal("matters = false for an owner lock left in place with no supervisor")
	}
	// matters only says so; listen rings for it. The rings that come
	// now are the ones told again.
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not told of the release again")
	}
}

// heldQueueLock is a waiter's queue lock, held as a living waiter holds
// it; closing the file lets go of it.
func heldQueueLock(t *testing.T, s *Store, id string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(s.Root(), queueDir, id+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return f
}

// closeInOwners closes a lock file of owners/ in place, as the last holder
// of a dead run's lock does.
func closeInOwners(t *testing.T, s *Store, name string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(s.Root(), ownersDir, name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func rung(t *testing.T, r *releases, what string) {
	t.Helper()
	select {
	case <-r.c:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the watch did not ring", what)
	}
}

// Only the head of the line watches owners/, so that a run's finish (its
// owner lock let go in place once, to be taken again) wakes one waiter,
// not the line; the head tells the others (ForOthers). A waiter becomes
// the head when the one ahead leaves, watches owners/ from then on, and
// looks once at once, for all, for what nobody heard meanwhile.
func TestOnlyTheHeadWatchesOwners(t *testing.T) {
	s := newStore(t)
	head, behind := "r-20261203T080000.000000001Z-00000000000000a1", "r-20261203T080000.000000002Z-00000000000000b2"
	headLock := heldQueueLock(t, s, head)
	heldQueueLock(t, s, behind)

	h, err := s.newReleases(record.RunID(head))
	if err != nil {
		t.Skipf("no inotify here: %v", err)
	}
	defer h.close()
	b, err := s.newReleases(record.RunID(behind))
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if h.ownersWD.Load() == 0 {
		t.Fatal("the head of the line does not watch owners/")
	}
	if b.ownersWD.Load() != 0 {
		t.Fatal("a waiter behind the head watches owners/: every finish wakes the whole line")
	}

	closeInOwners(t, s, "r-dead.lock")
	rung(t, h, "the head, a run's lock let go in place")
	if !h.forOthers.Swap(false) {
		t.Error("the head heard a release in owners/ but is not to ring the others for it")
	}

	// The head leaves as an admitted waiter does: its lock removed, then
	// let go. The waiter behind is now the head.
	if err := os.Remove(headLock.Name()); err != nil {
		t.Fatal(err)
	}
	headLock.Close()
	rung(t, b, "the waiter behind, the head gone")
	if !b.forOthers.Swap(false) {
		t.Error("the new head looks once, but not for the others")
	}
	if b.ownersWD.Load() == 0 {
		t.Fatal("the new head of the line does not watch owners/")
	}
	closeInOwners(t, s, "r-dead2.lock")
	rung(t, b, "the new head, a run's lock let go in place")
}
