//go:build linux

package lockfs

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// closesSeen watches dir for closes of files opened for writing and
// returns a function that reports the names it heard of so far.
func closesSeen(t *testing.T, dir string) func() []string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Skipf("no inotify: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CLOSE_WRITE); err != nil {
		t.Fatal(err)
	}
	return func() []string {
		var names []string
		buf := make([]byte, 4096)
		for {
			n, err := unix.Read(fd, buf)
			if err != nil || n <= 0 {
				return names
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				names = append(names, string(trimNUL(name)))
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// A lock file's last close is heard by a watch on its directory even
// after it was removed from it (RemoveAndRelease), but not once it was
// moved out of it first (RemoveUnseenAndRelease): waiters on a state root
// watch owners/ for the locks the dead leave, and a normal end must not
// wake them all.
func TestRemoveUnseenAndReleaseIsNotHeard(t *testing.T) {
	d := newLockDir(t)
	if err := os.Mkdir(d.at(".aside"), 0o700); err != nil {
		t.Fatal(err)
	}
	heard := closesSeen(t, d.at("."))

	l, err := Create(d.root, "seen.lock")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveAndRelease(); err != nil {
		t.Fatal(err)
	}
	if got := heard(); len(got) != 1 || got[0] != "seen.lock" {
		t.Fatalf("closes heard after RemoveAndRelease = %q, want [seen.lock]: the check below would prove nothing", got)
	}

	l, err = Create(d.root, testLockName)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveUnseenAndRelease(".aside"); err != nil {
		t.Fatal(err)
	}
	if got := heard(); len(got) != 0 {
		t.Errorf("closes heard after RemoveUnseenAndRelease = %q, want none", got)
	}
	if names := dirNames(t, d.at(".aside")); len(names) != 0 {
		t.Errorf("left in the aside directory: %q", names)
	}
	if _, err := os.Lstat(d.at(testLockName)); !os.IsNotExist(err) {
		t.Errorf("lock file still at its name: %v", err)
	}

	// No aside directory: removed in place, as RemoveAndRelease does.
	l, err = Create(d.root, "fallback.lock")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveUnseenAndRelease(".missing"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(d.at("fallback.lock")); !os.IsNotExist(err) {
		t.Errorf("lock file still at its name after the fallback: %v", err)
	}
}
