package lockfs

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestCreateCreatesLockedFile(t *testing.T) {
	d := newLockDir(t)
	l, err := Create(d.root, testLockName)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if l.Name() != testLockName {
		t.Errorf("Name() = %q, want %q", l.Name(), testLockName)
	}
	if l.File() == nil {
		t.Fatal("File() is nil")
	}
	fi, err := os.Stat(d.at(testLockName))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("lock file mode = %v, want 0600", perm)
	}
	if same, err := l.StillAtName(); err != nil || !same {
		t.Errorf("StillAtName() = %v, %v right after Create", same, err)
	}
	// A second open file description (here, in this same process) sees
	// the lock: that is all a different process would see too.
	if !mustProbe(t, d, testLockName) {
		t.Error("Probe = false right after Create, want true")
	}
	if _, err := Take(d.root, testLockName); !errors.Is(err, ErrBusy) {
		t.Errorf("Take on a held lock = %v, want ErrBusy", err)
	}
	other := startHelper(t, "take", d.at(testLockName))
	other.Expect("busy")
}

func TestCreateFailsIfFileExists(t *testing.T) {
	d := newLockDir(t)
	if err := os.WriteFile(d.at(testLockName), []byte("someone else's"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Create(d.root, testLockName)
	if err == nil {
		l.Release()
		t.Fatal("Create on an existing file succeeded, want an error (O_EXCL)")
	}
	// Admission retries with a fresh run id on exactly this error.
	if !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create error = %v, want errors.Is(err, fs.ErrExist)", err)
	}
	if !strings.Contains(err.Error(), testLockName) {
		t.Errorf("Create error %q does not name the lock", err)
	}
	// The existing file is left alone: not removed, not truncated.
	b, rerr := os.ReadFile(d.at(testLockName))
	if rerr != nil || string(b) != "someone else's" {
		t.Errorf("existing file after failed Create: %q, %v", b, rerr)
	}
}

func TestCreateFailsIfFileExistsAndLeavesHolderAlone(t *testing.T) {
	d := newLockDir(t)
	h := startHelper(t, "hold-create", d.at(testLockName))
	h.Expect("locked")

	if l, err := Create(d.root, testLockName); err == nil {
		l.Release()
		t.Fatal("Create on another process's lock file succeeded")
	} else if !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create error = %v, want fs.ErrExist", err)
	}
	if _, err := os.Stat(d.at(testLockName)); err != nil {
		t.Fatalf("failed Create removed the holder's file: %v", err)
	}
	if !mustProbe(t, d, testLockName) {
		t.Error("holder's lock no longer held after a failed Create")
	}
	h.Send("still")
	if line := h.Expect("still "); line != "still true <nil>" {
		t.Errorf("holder's StillAtName after a failed Create: %q", line)
	}
}

func TestCreateMissingDir(t *testing.T) {
	d := newLockDir(t)
	if l, err := Create(d.root, "no-such-dir/x.lock"); err == nil {
		l.Release()
		t.Fatal("Create in a missing directory succeeded")
	}
	// The directory the root stands for is gone.
	gone := newLockDir(t)
	if err := os.Remove(gone.path); err != nil {
		t.Fatal(err)
	}
	if l, err := Create(gone.root, testLockName); err == nil {
		l.Release()
		t.Fatal("Create in a removed directory succeeded")
	}
}

func TestProbeMissingFileIsFalseAndCreatesNothing(t *testing.T) {
	d := newLockDir(t)
	held, err := Probe(d.root, "missing.lock")
	if err != nil || held {
		t.Fatalf("Probe(missing) = %v, %v; want false, nil", held, err)
	}
	if names := dirNames(t, d.path); len(names) != 0 {
		t.Fatalf("Probe left files behind: %v", names)
	}
	// Nor in a missing directory.
	held, err = Probe(d.root, "nodir/x.lock")
	if err != nil || held {
		t.Fatalf("Probe(missing dir) = %v, %v; want false, nil", held, err)
	}
}

func TestProbeDoesNotModifyFile(t *testing.T) {
	d := newLockDir(t)
	path := d.at(testLockName)
	if err := os.WriteFile(path, []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if mustProbe(t, d, testLockName) {
		t.Fatal("Probe of an unlocked file = true")
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(old) || fi.Size() != int64(len("content")) {
		t.Errorf("Probe modified the file: mtime %v size %d", fi.ModTime(), fi.Size())
	}
	// Probe's shared lock is gone when it returns: an exclusive lock can
	// be taken right after.
	l, err := Take(d.root, testLockName)
	if err != nil {
		t.Fatalf("Take after Probe: %v", err)
	}
	l.Release()
}

func TestProbeSeesOtherProcessUntilSIGKILL(t *testing.T) {
	d := newLockDir(t)
	h := startHelper(t, "hold-create", d.at(testLockName))
	h.Expect("locked")

	for range 3 { // probing repeatedly does not disturb the holder
		if !mustProbe(t, d, testLockName) {
			t.Fatal("Probe = false while another process holds the lock")
		}
	}

	h.Kill()
	if mustProbe(t, d, testLockName) {
		t.Fatal("Probe = true after the holder was SIGKILLed; the kernel should have released it")
	}
	// The file outlives its dead holder (nobody removed it); the lock did not.
	if _, err := os.Stat(d.at(testLockName)); err != nil {
		t.Fatalf("lock file after holder died: %v", err)
	}
}

func TestProbeAfterHolderReleasesWithoutRemoving(t *testing.T) {
	d := newLockDir(t)
	h := startHelper(t, "hold-create", d.at(testLockName))
	h.Expect("locked")
	h.Send("release")
	h.Expect("released")
	if mustProbe(t, d, testLockName) {
		t.Fatal("Probe = true after the holder released")
	}
	if _, err := os.Stat(d.at(testLockName)); err != nil {
		t.Fatalf("Release removed the lock file: %v", err)
	}
}

func TestTakeAcrossProcesses(t *testing.T) {
	d := newLockDir(t)
	h := startHelper(t, "hold-create", d.at(testLockName))
	h.Expect("locked")

	if l, err := Take(d.root, testLockName); !errors.Is(err, ErrBusy) {
		if l != nil {
			l.Release()
		}
		t.Fatalf("Take while another process holds it = %v, want ErrBusy", err)
	}
	// A failed Take leaves the holder's lock alone.
	if !mustProbe(t, d, testLockName) {
		t.Fatal("holder lost its lock after a failed Take")
	}

	h.Kill()
	l, err := Take(d.root, testLockName)
	if err != nil {
		t.Fatalf("Take after the holder died = %v, want success", err)
	}
	if l.Name() != testLockName {
		t.Errorf("Name() = %q", l.Name())
	}
	// Now we hold it, and another process sees it.
	other := startHelper(t, "take", d.at(testLockName))
	other.Expect("busy")
	if !mustProbe(t, d, testLockName) {
		t.Error("Probe = false while Take's lock is held")
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	third := startHelper(t, "take", d.at(testLockName))
	third.Expect("locked")
	third.Finish()
}

func TestTakeMissingFileIsErrGone(t *testing.T) {
	d := newLockDir(t)
	l, err := Take(d.root, testLockName)
	if !errors.Is(err, ErrGone) {
		if l != nil {
			l.Release()
		}
		t.Fatalf("Take(missing) = %v, want ErrGone", err)
	}
	if _, err := os.Stat(d.at(testLockName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("Take created the missing file")
	}
}

func TestTakeAfterHolderRemovedIsErrGone(t *testing.T) {
	d := newLockDir(t)
	h := startHelper(t, "hold-create", d.at(testLockName))
	h.Expect("locked")
	if _, err := Take(d.root, testLockName); !errors.Is(err, ErrBusy) {
		t.Fatalf("Take while held = %v, want ErrBusy", err)
	}
	h.Send("remove")
	h.Expect("removed")
	if _, err := Take(d.root, testLockName); !errors.Is(err, ErrGone) {
		t.Fatalf("Take after RemoveAndRelease = %v, want ErrGone", err)
	}
	if mustProbe(t, d, testLockName) {
		t.Fatal("Probe = true after RemoveAndRelease")
	}
}

func TestConcurrentProbesDoNotSeeEachOther(t *testing.T) {
	d := newLockDir(t)
	path := d.at(testLockName)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	// Deterministic: another process is in the middle of a probe (it holds
	// the shared lock a probe takes). Our probe must not mistake it for a
	// holder.
	sh := startHelper(t, "hold-shared", path)
	sh.Expect("locked")
	for range 3 {
		if mustProbe(t, d, testLockName) {
			t.Fatal("Probe = true while another process only probes (holds LOCK_SH)")
		}
	}
	sh.Kill()

	// And under load: two processes and this one probe in tight loops at
	// the same time; none ever sees a holder.
	a := startHelper(t, "probe-loop", path)
	b := startHelper(t, "probe-loop", path)
	a.Expect("probing")
	b.Expect("probing")
	deadline := time.Now().Add(300 * time.Millisecond)
	n := 0
	for time.Now().Before(deadline) {
		if mustProbe(t, d, testLockName) {
			t.Fatalf("Probe = true after %d probes while only other probes ran", n)
		}
		n++
	}
	for _, h := range []*helper{a, b} {
		_ = h.Stdin.Close()
		line := h.Expect("probes=")
		if !strings.Contains(line, " held=0 errors=0") {
			t.Errorf("helper %d: %s; want held=0 errors=0", h.Pid(), line)
		}
		h.Finish()
	}
	// Probes never create or remove anything.
	if names := dirNames(t, d.path); len(names) != 1 {
		t.Errorf("files after probing: %v", names)
	}
}

func TestReleaseKeepsFileRemoveAndReleaseRemovesIt(t *testing.T) {
	d := newLockDir(t)
	l, err := Create(d.root, testLockName)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.at(testLockName)); err != nil {
		t.Fatalf("Release removed the lock file: %v", err)
	}
	if mustProbe(t, d, testLockName) {
		t.Fatal("Probe = true after Release")
	}
	// A second Release is an error (the descriptor is closed), not a panic.
	if err := l.Release(); err == nil {
		t.Error("second Release returned nil")
	}

	l, err = Take(d.root, testLockName)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveAndRelease(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.at(testLockName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("RemoveAndRelease left the file (stat err %v)", err)
	}
	if _, err := Take(d.root, testLockName); !errors.Is(err, ErrGone) {
		t.Fatalf("Take after RemoveAndRelease = %v, want ErrGone", err)
	}
}

func TestRemoveAndReleaseToleratesMissingFile(t *testing.T) {
	d := newLockDir(t)
	l, err := Create(d.root, testLockName)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(d.at(testLockName)); err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveAndRelease(); err != nil {
		t.Fatalf("RemoveAndRelease with the file already gone = %v, want nil", err)
	}
}

// The lock lives on in a child that inherited the descriptor through
// ExtraFiles after the parent closes its own, and only there: a child that
// did not inherit it (Go opens files close-on-exec) does not keep it.
func TestLockInheritedThroughExtraFiles(t *testing.T) {
	d := newLockDir(t)
	l, err := Create(d.root, testLockName)
	if err != nil {
		t.Fatal(err)
	}
	child := startHelper(t, "hold-inherited", "", func(c *exec.Cmd) {
		c.ExtraFiles = []*os.File{l.File()}
	})
	child.Expect("locked")
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if !mustProbe(t, d, testLockName) {
		t.Fatal("Probe = false after the parent released, while a child holds the inherited descriptor")
	}
	if _, err := Take(d.root, testLockName); !errors.Is(err, ErrBusy) {
		t.Fatalf("Take while the child holds the inherited lock = %v, want ErrBusy", err)
	}
	child.Finish()
	if mustProbe(t, d, testLockName) {
		t.Fatal("Probe = true after the inheriting child exited")
	}
}

func TestLockNotInheritedWithoutExtraFiles(t *testing.T) {
	d := newLockDir(t)
	l, err := Create(d.root, testLockName)
	if err != nil {
		t.Fatal(err)
	}
	child := startHelper(t, "idle", "")
	child.Expect("ready")
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if mustProbe(t, d, testLockName) {
		t.Fatal("Probe = true after release although the child was not handed the descriptor (close-on-exec broken?)")
	}
}

// The design's case: the supervisor dies (SIGKILL) while the command it
// launched still works; the slot must stay held until the command is gone.
func TestLockSurvivesSupervisorSIGKILL(t *testing.T) {
	d := newLockDir(t)
	sup := startHelper(t, "spawn-inheritor", d.at(testLockName))
	line := sup.Expect("locked ")
	grandchild := atoi(t, strings.TrimPrefix(line, "locked "))
	t.Cleanup(func() { killPID(grandchild) })

	sup.Kill()
	if !mustProbe(t, d, testLockName) {
		t.Fatal("Probe = false after the supervisor died, while its command (which inherited the lock) lives")
	}
	killPID(grandchild)
	// The grandchild is not ours to reap; the kernel releases its locks as
	// it exits.
	if !eventually(5*time.Second, func() bool { return !mustProbe(t, d, testLockName) }) {
		t.Fatal("Probe still true 5s after the last inheritor was SIGKILLed")
	}
}

// A detached supervisor adopts the lock descriptor it inherited: it holds
// the lock already (same open file description), and can finish the run
// with it, removing the file, after its parent let go.
func TestAdoptInheritedLock(t *testing.T) {
	d := newLockDir(t)
	l, err := Create(d.root, testLockName)
	if err != nil {
		t.Fatal(err)
	}
	child := startHelper(t, "adopt-inherited", d.at(testLockName), func(c *exec.Cmd) {
		c.ExtraFiles = []*os.File{l.File()}
	})
	child.Expect("locked")
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if !mustProbe(t, d, testLockName) {
		t.Fatal("Probe = false while the adopting child holds the lock")
	}
	child.Send("still")
	if line := child.Expect("still "); line != "still true <nil>" {
		t.Errorf("adopted lock's StillAtName: %q", line)
	}
	child.Send("remove")
	child.Expect("removed")
	if _, err := os.Stat(d.at(testLockName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("adopted lock's RemoveAndRelease left the file (stat: %v)", err)
	}
	if mustProbe(t, d, testLockName) {
		t.Error("Probe = true after the adopter removed and released the lock")
	}
}

// Adopt refuses a descriptor that is not the lock file at the name: the
// parent handed over the wrong file, or the file was removed meanwhile.
func TestAdoptRefusesAnotherFile(t *testing.T) {
	d := newLockDir(t)
	l, err := Create(d.root, testLockName)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	other, err := Create(d.root, "other.lock")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	if a, err := Adopt(other.File(), d.root, testLockName); err == nil {
		t.Errorf("Adopt(other.lock's descriptor, %s) = %v, want an error", testLockName, a)
	}
	if a, err := Adopt(l.File(), d.root, "missing.lock"); err == nil {
		t.Errorf("Adopt(descriptor, missing name) = %v, want an error", a)
	}
	if a, err := Adopt(l.File(), d.root, testLockName); err != nil || a.Name() != testLockName {
		t.Errorf("Adopt(the right descriptor) = %v, %v", a, err)
	}
}

func TestStillAtName(t *testing.T) {
	d := newLockDir(t)
	l, err := Create(d.root, testLockName)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if same, err := l.StillAtName(); !same || err != nil {
		t.Fatalf("StillAtName() = %v, %v; want true", same, err)
	}
	// Replaced by another file at the same name.
	if err := os.Rename(d.at(testLockName), d.at("moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.at(testLockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if same, err := l.StillAtName(); same || err != nil {
		t.Errorf("StillAtName() after replacement = %v, %v; want false", same, err)
	}
	// Replaced by a link to the locked file itself: the name no longer
	// holds the file, a link does.
	if err := os.Remove(d.at(testLockName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("moved", d.at(testLockName)); err != nil {
		t.Fatal(err)
	}
	if same, _ := l.StillAtName(); same {
		t.Error("StillAtName() = true for a link to the locked file")
	}
	// Gone.
	if err := os.Remove(d.at(testLockName)); err != nil {
		t.Fatal(err)
	}
	if same, err := l.StillAtName(); same || err != nil {
		t.Errorf("StillAtName() after removal = %v, %v; want false, nil", same, err)
	}
}

// Lock files are opened like every state-root file: never through a link,
// never anything but a regular file, and never blocking. A FIFO nobody
// writes to at a lock's name must not hang a prober (it runs inside the
// admission lock), and a link must not make crew lock, or create, a file
// elsewhere.
func TestLockFilesRefuseLinksAndFIFOs(t *testing.T) {
	d := newLockDir(t)
	outside := t.TempDir()
	target := outside + "/target.lock"
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, d.at("link.lock")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside+"/dangling.lock", d.at("dangling.lock")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(d.at("fifo.lock"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // release any open a broken implementation blocks in
		if f, err := os.OpenFile(d.at("fifo.lock"), os.O_RDWR|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	if err := os.Mkdir(d.at("dir.lock"), 0o700); err != nil {
		t.Fatal(err)
	}
	type result struct {
		l    *Lock
		held bool
		err  error
	}
	ops := map[string]func(name string) result{
		"Take": func(name string) result { l, err := Take(d.root, name); return result{l: l, err: err} },
		"Probe": func(name string) result {
			held, err := Probe(d.root, name)
			return result{held: held, err: err}
		},
		"Acquire": func(name string) result {
			l, err := Acquire(t.Context(), d.root, name, time.Second, nil)
			return result{l: l, err: err}
		},
	}
	for _, name := range []string{"link.lock", "dangling.lock", "fifo.lock", "dir.lock"} {
		for opName, op := range ops {
			ch := make(chan result, 1)
			go func() { ch <- op(name) }()
			var r result
			select {
			case r = <-ch:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s(%s) blocked", opName, name)
			}
			if r.l != nil {
				r.l.Release()
				t.Errorf("%s(%s) locked it", opName, name)
			}
			// An error, never "not held": a prober that cannot tell must
			// not report the lock free.
			if r.err == nil || r.held || errors.Is(r.err, ErrGone) || errors.Is(r.err, ErrBusy) {
				t.Errorf("%s(%s) = held %v, %v; want an error", opName, name, r.held, r.err)
			} else if !strings.Contains(r.err.Error(), name) {
				t.Errorf("%s(%s) error %q does not name the lock", opName, name, r.err)
			}
		}
		if l, err := Create(d.root, name); err == nil || !errors.Is(err, fs.ErrExist) {
			if l != nil {
				l.Release()
			}
			t.Errorf("Create(%s) = %v, want ErrExist", name, err)
		}
	}
	if _, err := os.Lstat(outside + "/dangling.lock"); !errors.Is(err, fs.ErrNotExist) {
		t.Error("a lock operation created the target of a dangling link outside the directory")
	}
	held := startHelper(t, "take", target)
	held.Expect("locked") // nobody locked the link's target
	held.Finish()
}

// stillAtPath reports whether the lock's descriptor is the file at its path
// (and not an inode someone removed while we were locking it). It does not
// use StillAtName, which is part of what is under test.
func stillAtPath(t *testing.T, l *Lock, path string) bool {
	t.Helper()
	held, err := l.Stat()
	if err != nil {
		t.Fatal(err)
	}
	now, err := os.Lstat(path)
	return err == nil && os.SameFile(held, now)
}

// churn races this process's lock attempts against a helper that creates
// (or takes over) the lock file and removes it in a loop. Whenever our
// attempt succeeds, the lock we got must be on the file at the path: a lock
// on a removed inode would look like a living holder to nobody, since every
// later Probe opens the path. The race window is a few microseconds, so
// this is a stress test: it catches a missing StillAtName check in most
// runs, not every run.
func churn(t *testing.T, mode string, attempt func(*os.Root, string) (*Lock, error)) {
	d := newLockDir(t)
	h := startHelper(t, mode, d.at(testLockName))
	h.Expect("churning")
	// At least 400ms and 10 wins (a run where no attempt won proves
	// nothing), at most 10s.
	start := time.Now()
	var tries, wins int
	for since := time.Duration(0); since < 10*time.Second && (since < 400*time.Millisecond || wins < 10); since = time.Since(start) {
		tries++
		l, err := attempt(d.root, testLockName)
		if err != nil {
			continue
		}
		wins++
		if !stillAtPath(t, l, d.at(testLockName)) {
			l.Release()
			t.Fatalf("attempt %d returned a lock on a file no longer at %s", tries, testLockName)
		}
		if err := l.RemoveAndRelease(); err != nil {
			t.Fatal(err)
		}
	}
	_ = h.Stdin.Close()
	line := h.Expect("cycles=")
	h.Finish()
	t.Logf("%d attempts, %d won; helper: %s", tries, wins, line)
	if wins < 10 {
		t.Errorf("only %d of %d attempts won the lock: the race was not exercised", wins, tries)
	}
}

func TestTakeNeverLocksARemovedFile(t *testing.T) {
	churn(t, "churn-create", Take)
}

func TestCreateNeverLocksARemovedFile(t *testing.T) {
	churn(t, "churn-take", Create)
}

func TestAcquireNeverLocksARemovedFile(t *testing.T) {
	churn(t, "churn-create", func(r *os.Root, name string) (*Lock, error) {
		return Acquire(t.Context(), r, name, 0, nil)
	})
}
