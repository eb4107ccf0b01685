package lockfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/rootfs"
)

// ErrBusy means another open file description holds the lock.
var ErrBusy = errors.New("lock is held by a living process")

// ErrGone means the lock file vanished (or was replaced) while we locked
// it: whoever held it finished and removed it.
var ErrGone = errors.New("lock file was removed by its last holder")

// ErrTimeout is a blocking acquisition that ran out of time.
var ErrTimeout = errors.New("timed out waiting for the lock")

// Lock is an exclusive flock held by this process on a file of dir. Its
// descriptor may be handed to a child (File), which then holds it too. A
// Lock keeps a handle on its directory of its own, for as long as it is
// held, so callers may close theirs.
type Lock struct {
	f    *os.File
	dir  *os.Root
	name string
}

// newLock wraps a locked descriptor with a directory handle of its own.
func newLock(f *os.File, dir *os.Root, name string) (*Lock, error) {
	own, err := dir.OpenRoot(".")
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return &Lock{f: f, dir: own, name: name}, nil
}

const lockPerm = 0o600

// Create creates name, which must not exist, and locks it. O_EXCL makes
// the file ours alone even if two processes picked the same name.
func Create(dir *os.Root, name string) (*Lock, error) {
	f, err := rootfs.Open(dir, name, os.O_RDWR|os.O_CREATE|os.O_EXCL, lockPerm)
	if err != nil {
		return nil, fmt.Errorf("create lock %s: %w", name, err)
	}
	// Between our create and our flock another process may have opened
	// the file: a prober holds a shared lock for microseconds; only a lock
	// held longer means someone else (a finalizer) has taken it.
	for attempt := 0; attempt < 200; attempt++ {
		if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
			break
		}
		time.Sleep(50 * time.Microsecond)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock new lock file %s: %w", name, err)
	}
	l, err := newLock(f, dir, name)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if same, err := l.StillAtName(); err != nil || !same {
		_ = l.Release()
		return nil, fmt.Errorf("new lock file %s was removed while being locked", name)
	}
	return l, nil
}

// Take takes over the existing lock file name if nobody holds it. It
// returns ErrBusy if a living process holds it, and ErrGone if the file no
// longer exists or was removed while we were locking it.
func Take(dir *os.Root, name string) (*Lock, error) {
	f, err := rootfs.Open(dir, name, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrGone
	}
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", name, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrBusy
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	// The last holder removes the file before closing it. If that happened
	// between our open and our flock, we hold a lock on an orphaned inode.
	l, err := newLock(f, dir, name)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if same, err := l.StillAtName(); err != nil || !same {
		_ = l.Release()
		if err != nil {
			return nil, err
		}
		return nil, ErrGone
	}
	return l, nil
}

// Acquire waits up to timeout for the exclusive lock on name, creating the
// file if it is missing. A contended wait blocks in the kernel (flock
// without LOCK_NB), so waiters cost no CPU and the lock passes on as soon
// as it is released. A blocking flock cannot be cancelled: on timeout or
// cancellation the waiting goroutine is abandoned and releases the lock
// itself if it ever gets it. onWait, if not nil, runs once when the lock
// turns out to be busy.
func Acquire(ctx context.Context, dir *os.Root, name string, timeout time.Duration, onWait func()) (*Lock, error) {
	f, err := rootfs.Open(dir, name, os.O_RDWR|os.O_CREATE, lockPerm)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", name, err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		if onWait != nil {
			onWait()
		}
		err = waitFlock(ctx, f, timeout)
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, ErrTimeout) || ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	l, err := newLock(f, dir, name)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return l, nil
}

// DirLock is an exclusive flock on a directory itself.
type DirLock struct{ f *os.File }

// AcquireDir waits up to timeout for the exclusive lock on the directory
// dir itself, like Acquire. A directory cannot be removed while it holds
// anything, and a lock on it cannot be swapped away by replacing a file
// inside it.
func AcquireDir(ctx context.Context, dir *os.Root, timeout time.Duration, onWait func()) (*DirLock, error) {
	f, err := dir.Open(".")
	if err != nil {
		return nil, err
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		if onWait != nil {
			onWait()
		}
		err = waitFlock(ctx, f, timeout)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &DirLock{f: f}, nil
}

// File is the locked directory's descriptor.
func (l *DirLock) File() *os.File { return l.f }

// Release unlocks the directory.
func (l *DirLock) Release() error { return l.f.Close() }

// waitFlock blocks until f is locked, the timeout passes, or ctx ends. On
// failure the descriptor is closed by whoever owns it last.
func waitFlock(ctx context.Context, f *os.File, timeout time.Duration) error {
	// The goroutine gets its own descriptor of the same open file
	// description, so abandoning it never races with our Close of f.
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return err
	}
	var (
		mu        sync.Mutex
		abandoned bool
		got       = make(chan error, 1)
	)
	go func() {
		err := flockRetry(fd, unix.LOCK_EX)
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			_ = unix.Close(fd) // the description (and any lock) goes with the last descriptor
			return
		}
		got <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var why error
	select {
	case err := <-got:
		_ = unix.Close(fd)
		return err
	case <-timer.C:
		why = ErrTimeout
	case <-ctx.Done():
		why = ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	abandoned = true
	select {
	case err := <-got:
		// Acquired just as we gave up: the caller closes f, and the lock
		// goes with the last descriptor.
		_ = unix.Close(fd)
		_ = err
	default:
	}
	return why
}

func flockRetry(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Probe reports whether a living process holds the lock on name, without
// creating or modifying anything. It takes a shared lock for an instant,
// so concurrent probes never mistake each other for a holder; a missing
// file means nobody holds it.
func Probe(dir *os.Root, name string) (held bool, err error) {
	held, _, err = ProbeFile(dir, name)
	return held, err
}

// ProbeFile is Probe, also returning the probed file's info (nil if it
// does not exist), so the caller can check it is the file it expects.
func ProbeFile(dir *os.Root, name string) (held bool, fi os.FileInfo, err error) {
	f, err := rootfs.Open(dir, name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("open lock %s: %w", name, err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return false, nil, fmt.Errorf("probe lock %s: %w", name, err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true, fi, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("probe lock %s: %w", name, err)
	}
	return false, fi, nil
}

// Adopt wraps a lock descriptor this process inherited (a detached
// supervisor's run locks). The lock is held already: it belongs to the
// open file description, which the parent shared with us.
func Adopt(f *os.File, dir *os.Root, name string) (*Lock, error) {
	l, err := newLock(f, dir, name)
	if err != nil {
		return nil, err
	}
	if same, err := l.StillAtName(); err != nil || !same {
		_ = l.dir.Close()
		return nil, fmt.Errorf("inherited descriptor %d is not the lock %s", f.Fd(), name)
	}
	return l, nil
}

// StillAtName reports whether the locked file is the one at its name (and
// not an inode someone removed or replaced).
func (l *Lock) StillAtName() (bool, error) {
	held, err := l.f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat lock %s: %w", l.name, err)
	}
	now, err := l.dir.Lstat(l.name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat lock %s: %w", l.name, err)
	}
	return os.SameFile(held, now), nil
}

// File is the locked descriptor, for a child process to inherit.
func (l *Lock) File() *os.File { return l.f }

// Name is the lock file's name in its directory.
func (l *Lock) Name() string { return l.name }

// Release drops this process's hold. A child that inherited the descriptor
// keeps the lock held.
func (l *Lock) Release() error {
	err := l.f.Close()
	_ = l.dir.Close()
	if err != nil {
		return fmt.Errorf("release lock %s: %w", l.name, err)
	}
	return nil
}

// RemoveAndRelease deletes the lock file and then releases it. Only the
// holder may do this, and only once what the lock guards is final:
// removing it first means nobody can lock the name again and be mistaken
// for a holder.
func (l *Lock) RemoveAndRelease() error {
	rmErr := l.dir.Remove(l.name)
	if errors.Is(rmErr, fs.ErrNotExist) {
		rmErr = nil
	}
	relErr := l.Release()
	if rmErr != nil {
		return fmt.Errorf("remove lock %s: %w", l.name, rmErr)
	}
	return relErr
}

// LockFile takes a flock on a file the caller opened (shared or
// exclusive) for a data file that is also its own lock, such as runstore's
// index of finished runs. It never blocks in the kernel: it polls with
// LOCK_NB, backing off from 50µs to 10ms, for up to timeout, so a holder
// that is slow (or stopped) costs the caller a bounded wait, never a hang.
// ErrTimeout: the lock was still busy. The lock goes when f is closed.
func LockFile(f *os.File, exclusive bool, timeout time.Duration) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	deadline := time.Now().Add(timeout)
	for delay := 50 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		err := flockRetry(int(f.Fd()), how|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return ErrTimeout
		}
		time.Sleep(delay)
	}
}
