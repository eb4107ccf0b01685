//go:build linux

package runstore

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	r := &releases{owners: owners, ownersWD: 1}
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
	r := &releases{owners: owners, ownersWD: 1, c: c}
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
