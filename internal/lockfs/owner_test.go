package lockfs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func ownerPath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "r-20240102T030405.000000006Z-0123456789abcdef.lock")
}

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

func TestCreateOwnerCreatesLockedFile(t *testing.T) {
	path := ownerPath(t)
	o, err := CreateOwner(path)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Release()
	if o.Path() != path {
		t.Errorf("Path() = %q, want %q", o.Path(), path)
	}
	if o.File() == nil {
		t.Fatal("File() is nil")
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("owner lock mode = %v, want 0600", perm)
	}
	// A second open file description (here, in this same process) sees
	// the lock: that is all a different process would see too.
	if !mustProbe(t, path) {
		t.Error("Probe = false right after CreateOwner, want true")
	}
	if _, err := TryOwner(path); !errors.Is(err, ErrBusy) {
		t.Errorf("TryOwner on a held lock = %v, want ErrBusy", err)
	}
}

func TestCreateOwnerFailsIfFileExists(t *testing.T) {
	path := ownerPath(t)
	if err := os.WriteFile(path, []byte("someone else's"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := CreateOwner(path)
	if err == nil {
		o.Release()
		t.Fatal("CreateOwner on an existing file succeeded, want an error (O_EXCL)")
	}
	// Admission retries with a fresh run id on exactly this error.
	if !errors.Is(err, os.ErrExist) {
		t.Errorf("CreateOwner error = %v, want errors.Is(err, os.ErrExist)", err)
	}
	// The existing file is left alone: not removed, not truncated.
	b, rerr := os.ReadFile(path)
	if rerr != nil || string(b) != "someone else's" {
		t.Errorf("existing file after failed CreateOwner: %q, %v", b, rerr)
	}
}

func TestCreateOwnerFailsIfFileExistsAndLeavesHolderAlone(t *testing.T) {
	path := ownerPath(t)
	h := startHelper(t, "hold-owner", path)
	h.expect("locked")

	if o, err := CreateOwner(path); err == nil {
		o.Release()
		t.Fatal("CreateOwner on another process's lock file succeeded")
	} else if !errors.Is(err, os.ErrExist) {
		t.Errorf("CreateOwner error = %v, want os.ErrExist", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("failed CreateOwner removed the holder's file: %v", err)
	}
	if !mustProbe(t, path) {
		t.Error("holder's lock no longer held after a failed CreateOwner")
	}
}

func TestCreateOwnerMissingDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "x.lock")
	if _, err := CreateOwner(path); err == nil {
		t.Fatal("CreateOwner in a missing directory succeeded")
	}
}

func TestProbeMissingFileIsFalseAndCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "missing.lock")
	held, err := Probe(path)
	if err != nil || held {
		t.Fatalf("Probe(missing) = %v, %v; want false, nil", held, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Probe created %s (stat err %v)", path, err)
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("Probe left files behind: %v", names)
	}
	// Nor in a missing directory.
	held, err = Probe(filepath.Join(dir, "nodir", "x.lock"))
	if err != nil || held {
		t.Fatalf("Probe(missing dir) = %v, %v; want false, nil", held, err)
	}
}

func TestProbeDoesNotModifyFile(t *testing.T) {
	path := ownerPath(t)
	if err := os.WriteFile(path, []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if mustProbe(t, path) {
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
	o, err := TryOwner(path)
	if err != nil {
		t.Fatalf("TryOwner after Probe: %v", err)
	}
	o.Release()
}

func TestProbeSeesOtherProcessUntilSIGKILL(t *testing.T) {
	path := ownerPath(t)
	h := startHelper(t, "hold-owner", path)
	h.expect("locked")

	for range 3 { // probing repeatedly does not disturb the holder
		if !mustProbe(t, path) {
			t.Fatal("Probe = false while another process holds the owner lock")
		}
	}

	h.kill()
	if mustProbe(t, path) {
		t.Fatal("Probe = true after the holder was SIGKILLed; the kernel should have released it")
	}
	// The file outlives its dead holder (nobody removed it); the lock did not.
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("lock file after holder died: %v", err)
	}
}

func TestProbeAfterHolderReleasesWithoutRemoving(t *testing.T) {
	path := ownerPath(t)
	h := startHelper(t, "hold-owner", path)
	h.expect("locked")
	h.send("release")
	h.expect("released")
	if mustProbe(t, path) {
		t.Fatal("Probe = true after the holder released")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("Release removed the lock file: %v", err)
	}
}

func TestTryOwnerAcrossProcesses(t *testing.T) {
	path := ownerPath(t)
	h := startHelper(t, "hold-owner", path)
	h.expect("locked")

	if o, err := TryOwner(path); !errors.Is(err, ErrBusy) {
		if o != nil {
			o.Release()
		}
		t.Fatalf("TryOwner while another process holds it = %v, want ErrBusy", err)
	}
	// A failed TryOwner leaves the holder's lock alone.
	if !mustProbe(t, path) {
		t.Fatal("holder lost its lock after a failed TryOwner")
	}

	h.kill()
	o, err := TryOwner(path)
	if err != nil {
		t.Fatalf("TryOwner after the holder died = %v, want success", err)
	}
	if o.Path() != path {
		t.Errorf("Path() = %q", o.Path())
	}
	// Now we are the owner, and another process sees it.
	other := startHelper(t, "take-owner", path)
	other.expect("busy")
	if !mustProbe(t, path) {
		t.Error("Probe = false while TryOwner's lock is held")
	}
	if err := o.Release(); err != nil {
		t.Fatal(err)
	}
	third := startHelper(t, "take-owner", path)
	third.expect("locked")
	third.finish()
}

func TestTryOwnerMissingFileIsErrGone(t *testing.T) {
	path := ownerPath(t)
	o, err := TryOwner(path)
	if !errors.Is(err, ErrGone) {
		if o != nil {
			o.Release()
		}
		t.Fatalf("TryOwner(missing) = %v, want ErrGone", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("TryOwner created the missing file")
	}
}

func TestTryOwnerAfterHolderRemovedIsErrGone(t *testing.T) {
	path := ownerPath(t)
	h := startHelper(t, "hold-owner", path)
	h.expect("locked")
	if _, err := TryOwner(path); !errors.Is(err, ErrBusy) {
		t.Fatalf("TryOwner while held = %v, want ErrBusy", err)
	}
	h.send("remove")
	h.expect("removed")
	if _, err := TryOwner(path); !errors.Is(err, ErrGone) {
		t.Fatalf("TryOwner after RemoveAndRelease = %v, want ErrGone", err)
	}
	if mustProbe(t, path) {
		t.Fatal("Probe = true after RemoveAndRelease")
	}
}

func TestConcurrentProbesDoNotSeeEachOther(t *testing.T) {
	path := ownerPath(t)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	// Deterministic: another process is in the middle of a probe (it holds
	// the shared lock a probe takes). Our probe must not mistake it for an
	// owner.
	sh := startHelper(t, "hold-shared", path)
	sh.expect("locked")
	for range 3 {
		if mustProbe(t, path) {
			t.Fatal("Probe = true while another process only probes (holds LOCK_SH)")
		}
	}
	sh.kill()

	// And under load: two processes and this one probe in tight loops at
	// the same time; none ever sees an owner.
	a := startHelper(t, "probe-loop", path)
	b := startHelper(t, "probe-loop", path)
	a.expect("probing")
	b.expect("probing")
	deadline := time.Now().Add(300 * time.Millisecond)
	n := 0
	for time.Now().Before(deadline) {
		if mustProbe(t, path) {
			t.Fatalf("Probe = true after %d probes while only other probes ran", n)
		}
		n++
	}
	for _, h := range []*helper{a, b} {
		_ = h.stdin.Close()
		line := h.expect("probes=")
		if !strings.Contains(line, " held=0 errors=0") {
			t.Errorf("helper %d: %s; want held=0 errors=0", h.pid(), line)
		}
		h.finish()
	}
	// Probes never create or remove anything.
	if names := dirNames(t, filepath.Dir(path)); len(names) != 1 {
		t.Errorf("files after probing: %v", names)
	}
}

func TestReleaseKeepsFileRemoveAndReleaseRemovesIt(t *testing.T) {
	path := ownerPath(t)
	o, err := CreateOwner(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("Release removed the owner lock file: %v", err)
	}
	if mustProbe(t, path) {
		t.Fatal("Probe = true after Release")
	}
	// A second Release is an error (the descriptor is closed), not a panic.
	if err := o.Release(); err == nil {
		t.Error("second Release returned nil")
	}

	o, err = TryOwner(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.RemoveAndRelease(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("RemoveAndRelease left the file (stat err %v)", err)
	}
	if _, err := TryOwner(path); !errors.Is(err, ErrGone) {
		t.Fatalf("TryOwner after RemoveAndRelease = %v, want ErrGone", err)
	}
}

func TestRemoveAndReleaseToleratesMissingFile(t *testing.T) {
	path := ownerPath(t)
	o, err := CreateOwner(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := o.RemoveAndRelease(); err != nil {
		t.Fatalf("RemoveAndRelease with the file already gone = %v, want nil", err)
	}
}

// The owner lock lives on in a child that inherited the descriptor through
// ExtraFiles after the parent closes its own, and only there: a child that
// did not inherit it (Go opens files close-on-exec) does not keep it.
func TestOwnerLockInheritedThroughExtraFiles(t *testing.T) {
	path := ownerPath(t)
	o, err := CreateOwner(path)
	if err != nil {
		t.Fatal(err)
	}
	child := startHelper(t, "hold-inherited", "", func(c *exec.Cmd) {
		c.ExtraFiles = []*os.File{o.File()}
	})
	child.expect("locked")
	if err := o.Release(); err != nil {
		t.Fatal(err)
	}
	if !mustProbe(t, path) {
		t.Fatal("Probe = false after the parent released, while a child holds the inherited descriptor")
	}
	if _, err := TryOwner(path); !errors.Is(err, ErrBusy) {
		t.Fatalf("TryOwner while the child holds the inherited lock = %v, want ErrBusy", err)
	}
	child.finish()
	if mustProbe(t, path) {
		t.Fatal("Probe = true after the inheriting child exited")
	}
}

func TestOwnerLockNotInheritedWithoutExtraFiles(t *testing.T) {
	path := ownerPath(t)
	o, err := CreateOwner(path)
	if err != nil {
		t.Fatal(err)
	}
	child := startHelper(t, "idle", "")
	child.expect("ready")
	if err := o.Release(); err != nil {
		t.Fatal(err)
	}
	if mustProbe(t, path) {
		t.Fatal("Probe = true after release although the child was not handed the descriptor (close-on-exec broken?)")
	}
}

// The design's case: the supervisor dies (SIGKILL) while the command it
// launched still works; the slot must stay held until the command is gone.
func TestOwnerLockSurvivesSupervisorSIGKILL(t *testing.T) {
	path := ownerPath(t)
	sup := startHelper(t, "spawn-inheritor", path)
	line := sup.expect("locked ")
	grandchild := atoi(t, strings.TrimPrefix(line, "locked "))
	t.Cleanup(func() { killPID(grandchild) })

	sup.kill()
	if !mustProbe(t, path) {
		t.Fatal("Probe = false after the supervisor died, while its command (which inherited the lock) lives")
	}
	killPID(grandchild)
	// The grandchild is not ours to reap; the kernel releases its locks as
	// it exits.
	if !eventually(5*time.Second, func() bool { return !mustProbe(t, path) }) {
		t.Fatal("Probe still true 5s after the last inheritor was SIGKILLed")
	}
}

// stillAtPath reports whether the lock's descriptor is the file at its path
// (and not an inode someone removed while we were locking it).
func stillAtPath(t *testing.T, o *OwnerLock) bool {
	t.Helper()
	held, err := o.File().Stat()
	if err != nil {
		t.Fatal(err)
	}
	now, err := os.Stat(o.Path())
	return err == nil && os.SameFile(held, now)
}

// churn races this process's lock attempts against a helper that creates
// (or takes over) the lock file and removes it in a loop. Whenever our
// attempt succeeds, the lock we got must be on the file at the path: a lock
// on a removed inode would look like a living owner to nobody, since every
// later Probe opens the path. The race window is a few microseconds, so
// this is a stress test: it catches a missing samePath check in most runs,
// not every run.
func churn(t *testing.T, mode string, attempt func(string) (*OwnerLock, error)) {
	path := ownerPath(t)
	h := startHelper(t, mode, path)
	h.expect("churning")
	deadline := time.Now().Add(400 * time.Millisecond)
	var tries, wins int
	for time.Now().Before(deadline) {
		tries++
		o, err := attempt(path)
		if err != nil {
			continue
		}
		wins++
		if !stillAtPath(t, o) {
			o.Release()
			t.Fatalf("attempt %d returned a lock on a file no longer at %s", tries, path)
		}
		if err := o.RemoveAndRelease(); err != nil {
			t.Fatal(err)
		}
	}
	_ = h.stdin.Close()
	line := h.expect("cycles=")
	h.finish()
	t.Logf("%d attempts, %d won; helper: %s", tries, wins, line)
}

func TestTryOwnerNeverLocksARemovedFile(t *testing.T) {
	churn(t, "churn-create", TryOwner)
}

func TestCreateOwnerNeverLocksARemovedFile(t *testing.T) {
	churn(t, "churn-take", CreateOwner)
}
