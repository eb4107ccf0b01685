package lockfs

// Acquire is the blocking, timed acquisition the admission lock is built
// on. What the admission lock adds (the holder note, the timeout error that
// names the holder, starting over when the lock file is replaced) is
// tested in package runstore.

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/helperproc"
)

const acquireName = "dispatch-admission.lock"

// holdAcquire starts a helper process that takes the lock with Acquire.
func holdAcquire(t *testing.T, d lockDir) *helper {
	t.Helper()
	h := startHelper(t, "hold-acquire", d.at(acquireName))
	h.Expect("waiting")
	h.Expect("locked")
	return h
}

type acquireResult struct {
	lock  *Lock
	err   error
	took  time.Duration
	waits int32 // how often onWait ran
}

// acquireAsync runs Acquire in a goroutine so a broken implementation that
// blocks forever fails the test instead of hanging it.
func acquireAsync(ctx context.Context, d lockDir, timeout time.Duration) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		var waits atomic.Int32
		start := time.Now()
		l, err := Acquire(ctx, d.root, acquireName, timeout, func() { waits.Add(1) })
		ch <- acquireResult{l, err, time.Since(start), waits.Load()}
	}()
	return ch
}

func awaitAcquire(t *testing.T, ch <-chan acquireResult, within time.Duration) acquireResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.lock != nil {
			t.Cleanup(func() { _ = r.lock.Release() })
		}
		return r
	case <-time.After(within):
		t.Fatalf("Acquire did not return within %s", within)
	}
	return acquireResult{}
}

// newAcquireDir is a lock directory with the lock file Acquire takes
// (crew creates it with CreateTemp and Publish, tested below).
func newAcquireDir(t *testing.T) lockDir {
	t.Helper()
	d := newLockDir(t)
	if err := os.WriteFile(d.at(acquireName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestAcquireFreeKeepsTheFile(t *testing.T) {
	d := newAcquireDir(t)
	r := awaitAcquire(t, acquireAsync(context.Background(), d, time.Second), 5*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.waits != 0 {
		t.Errorf("onWait ran %d times for a free lock, want 0", r.waits)
	}
	if !mustProbe(t, d, acquireName) {
		t.Error("Probe = false while Acquire's lock is held")
	}
	if r.lock.File() != nil {
		t.Error("a lock taken through gofrs/flock offers a descriptor to hand on")
	}
	if err := r.lock.Release(); err != nil {
		t.Fatal(err)
	}
	if mustProbe(t, d, acquireName) {
		t.Error("Probe = true after Release")
	}
	if _, err := os.Stat(d.at(acquireName)); err != nil {
		t.Fatalf("Release removed the lock file: %v", err)
	}
	// Free again, in this process and in another; the file stays.
	r = awaitAcquire(t, acquireAsync(context.Background(), d, 0), 5*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.lock.Release(); err != nil {
		t.Fatal(err)
	}
	h := holdAcquire(t, d)
	h.Finish()
	if _, err := os.Stat(d.at(acquireName)); err != nil {
		t.Fatalf("lock file gone after a helper's acquire and exit: %v", err)
	}
}

// Acquire never creates a lock file: a missing one is ErrGone, and stays
// missing.
func TestAcquireMissingFileIsErrGone(t *testing.T) {
	d := newLockDir(t)
	if l, err := Acquire(context.Background(), d.root, acquireName, time.Second, nil); !errors.Is(err, ErrGone) {
		if l != nil {
			_ = l.Release()
		}
		t.Fatalf("Acquire of a missing file = %v, want ErrGone", err)
	}
	if _, err := os.Lstat(d.at(acquireName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Acquire created the lock file: %v", err)
	}
}

// A waiter blocked on a lock file whose holder removes it before letting
// go gets the removed inode: it must say so (ErrGone), not believe it
// holds the lock at the name, which a newcomer may be holding by then.
func TestAcquireWaiterOfARemovedFileIsErrGone(t *testing.T) {
	d := newAcquireDir(t)
	h := holdAcquire(t, d)
	ch := acquireAsync(context.Background(), d, time.Minute)
	helperproc.BlockedOn(t, d.at(acquireName), os.Getpid())
	h.Send("remove")
	h.Expect("removed")
	h.Send("release")
	h.Expect("released")
	if r := awaitAcquire(t, ch, 10*time.Second); !errors.Is(r.err, ErrGone) {
		t.Fatalf("Acquire after its file was removed under it = %v, %v; want ErrGone", r.lock, r.err)
	}
}

// CreateTemp and Publish: the file appears at its name already locked by
// its creator (a taker sees it busy, never free), once; a second Publish
// is ErrExist and leaves the first alone.
func TestCreateTempPublish(t *testing.T) {
	d := newLockDir(t)
	l, err := CreateTemp(d.root, acquireName, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, d.path); len(names) != 1 || !strings.HasPrefix(names[0], "."+acquireName) {
		t.Fatalf("after CreateTemp the directory holds %v, want one temporary file", names)
	}
	if err := l.Publish(acquireName); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, d.path); len(names) != 1 || names[0] != acquireName {
		t.Fatalf("after Publish the directory holds %v, want %s alone", names, acquireName)
	}
	if fi, err := os.Stat(d.at(acquireName)); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("published lock file = %v, %v; want mode 0640", fi, err)
	}
	other := startHelper(t, "take", d.at(acquireName))
	other.Expect("busy")
	other.Finish()
	if same, err := l.StillAtName(); err != nil || !same {
		t.Errorf("StillAtName after Publish = %v, %v", same, err)
	}
	second, err := CreateTemp(d.root, acquireName, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Publish(acquireName); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second Publish = %v, want ErrExist", err)
	}
	if err := second.RemoveAndRelease(); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, d.path); len(names) != 1 || names[0] != acquireName {
		t.Fatalf("after a refused Publish the directory holds %v, want %s alone", names, acquireName)
	}
	_ = l.Release()
}

func TestAcquireTimesOut(t *testing.T) {
	d := newAcquireDir(t)
	holdAcquire(t, d)

	const timeout = 250 * time.Millisecond
	r := awaitAcquire(t, acquireAsync(context.Background(), d, timeout), 10*time.Second)
	if r.lock != nil || !errors.Is(r.err, ErrTimeout) {
		t.Fatalf("Acquire while another process holds the lock = %v, %v; want ErrTimeout", r.lock, r.err)
	}
	if r.took < timeout {
		t.Errorf("gave up after %s, before the %s timeout", r.took, timeout)
	}
	if r.waits != 1 {
		t.Errorf("onWait ran %d times, want once", r.waits)
	}
}

func TestAcquireZeroTimeoutFailsWhenBusy(t *testing.T) {
	d := newAcquireDir(t)
	holdAcquire(t, d)
	r := awaitAcquire(t, acquireAsync(context.Background(), d, 0), 5*time.Second)
	if !errors.Is(r.err, ErrTimeout) {
		t.Fatalf("Acquire(timeout 0) while held = %v, want ErrTimeout", r.err)
	}
}

// A holder killed with SIGKILL releases at once: even a zero timeout (no
// waiting at all) gets the lock right after the holder is reaped.
func TestAcquireRightAfterHolderSIGKILL(t *testing.T) {
	d := newAcquireDir(t)
	h := holdAcquire(t, d)
	h.Kill()
	r := awaitAcquire(t, acquireAsync(context.Background(), d, 0), 5*time.Second)
	if r.err != nil {
		t.Fatalf("Acquire(timeout 0) after the holder was killed: %v", r.err)
	}
	if _, err := os.Stat(d.at(acquireName)); err != nil {
		t.Fatal(err)
	}
}

// A waiter that is still within its timeout gets the lock when the holder
// releases it; until then it is excluded.
func TestAcquireWaitsForRelease(t *testing.T) {
	d := newAcquireDir(t)
	h := holdAcquire(t, d)
	ch := acquireAsync(context.Background(), d, time.Minute)
	select {
	case r := <-ch:
		if r.lock != nil {
			_ = r.lock.Release()
		}
		t.Fatalf("Acquire returned (%v) while another process holds the lock", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	h.Send("release")
	h.Expect("released")
	r := awaitAcquire(t, ch, 10*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.waits != 1 {
		t.Errorf("onWait ran %d times, want once", r.waits)
	}
	if _, err := os.Stat(d.at(acquireName)); err != nil {
		t.Fatalf("lock file gone after the helper's Release: %v", err)
	}
	// And now we exclude the helper's successor.
	other := startHelper(t, "take", d.at(acquireName))
	other.Expect("busy")
}

// The reverse direction: while this process holds the lock, another
// process waits, and gets it when we release.
func TestAcquireExcludesOtherProcess(t *testing.T) {
	d := newAcquireDir(t)
	l, err := Acquire(context.Background(), d.root, acquireName, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, "hold-acquire", d.at(acquireName))
	h.Expect("waiting")
	h.Expect("busy") // its onWait: it found the lock held
	h.SilentFor(300 * time.Millisecond)
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	h.Expect("locked")
}

func TestAcquireTimeoutInOtherProcess(t *testing.T) {
	d := newAcquireDir(t)
	l, err := Acquire(context.Background(), d.root, acquireName, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	h := startHelper(t, "hold-acquire", d.at(acquireName), func(c *exec.Cmd) {
		c.Env = append(c.Env, helperTimeout+"=150ms")
	})
	h.Expect("waiting")
	h.Expect("busy")
	h.Expect("timeout")
}

func TestAcquireContextCanceled(t *testing.T) {
	d := newAcquireDir(t)
	h := holdAcquire(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	ch := acquireAsync(ctx, d, time.Minute)
	helperproc.BlockedOn(t, d.at(acquireName), os.Getpid())
	cancel()
	r := awaitAcquire(t, ch, 5*time.Second)
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", r.err)
	}
	if errors.Is(r.err, ErrTimeout) {
		t.Errorf("a canceled wait reported a timeout: %v", r.err)
	}
	// The abandoned wait does not keep the lock once the holder lets go.
	h.Send("release")
	h.Expect("released")
	if !staysFree(t, d) {
		t.Fatal("lock not free for good within 5s of the holder's release: the abandoned waiter kept it")
	}
	other := startHelper(t, "take", d.at(acquireName))
	other.Expect("locked")
}

// staysFree waits until the lock has been free for a while without a
// break. When a holder lets go, abandoned waiters still blocked in the
// kernel get the lock one after another and (if correct) drop it at
// once, so a single free probe proves nothing; a waiter that kept the
// lock would hold it again within microseconds.
func staysFree(t *testing.T, d lockDir) bool {
	t.Helper()
	var freeSince time.Time
	return eventually(5*time.Second, func() bool {
		if mustProbe(t, d, acquireName) {
			freeSince = time.Time{}
			return false
		}
		if freeSince.IsZero() {
			freeSince = time.Now()
		}
		return time.Since(freeSince) >= 200*time.Millisecond
	})
}

// A blocking flock cannot be cancelled: a waiter that timed out abandons
// its wait, and if the lock comes to it later it must let it go at once,
// not sit on it for the rest of the process's life.
func TestAcquireTimedOutWaiterNeverKeepsTheLock(t *testing.T) {
	d := newAcquireDir(t)
	h := holdAcquire(t, d)
	for range 3 {
		r := awaitAcquire(t, acquireAsync(context.Background(), d, 50*time.Millisecond), 10*time.Second)
		if !errors.Is(r.err, ErrTimeout) {
			t.Fatalf("Acquire = %v, want ErrTimeout", r.err)
		}
	}
	h.Send("release")
	h.Expect("released")
	if !staysFree(t, d) {
		t.Fatal("lock not free for good within 5s of the holder's release: a timed-out waiter kept it")
	}
	other := startHelper(t, "take", d.at(acquireName))
	other.Expect("locked")
}

func TestAcquireMissingDir(t *testing.T) {
	d := newLockDir(t)
	_, err := Acquire(context.Background(), d.root, "missing/"+acquireName, time.Second, nil)
	if !errors.Is(err, ErrGone) {
		t.Fatalf("Acquire in a missing directory = %v, want ErrGone", err)
	}
}
