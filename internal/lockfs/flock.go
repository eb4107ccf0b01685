package lockfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/gofrs/flock"
	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/rootfs"
)

// Locks crew takes for itself alone go through github.com/gofrs/flock,
// which opens the lock file by path. crew's rules for files of the state
// root still hold: the name is looked at through the root first (a
// regular file with one link, or nothing is opened), the open follows no
// link at the name and never blocks, and once locked, the locked file must
// be the one at the name (same device and inode, still one link): a file
// removed, replaced or reached through a directory swapped for a link in
// the meantime is let go again (ErrGone), never believed.

// byPath is how gofrs/flock opens a lock file: read-only (flock needs no
// more, and nothing is written through it), never through a symbolic link
// at the name, never blocking on a FIFO or device swapped in, and never
// creating: lock files are created through the root (Create, CreateTemp).
const byPath = os.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK

func pathFlock(dir *os.Root, name string) *flock.Flock {
	return flock.New(filepath.Join(dir.Name(), name), flock.SetFlag(byPath))
}

// lockable looks at name through the root before anything opens it by
// path: ErrGone if it does not exist, an error if it is anything but a
// regular file with one link.
func lockable(dir *os.Root, name string) error {
	fi, err := dir.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ErrGone
	case err != nil:
		return fmt.Errorf("lock %s: %w", name, err)
	case !fi.Mode().IsRegular():
		return &rootfs.NotRegularError{Name: name, Mode: fi.Mode()}
	case rootfs.Links(fi) != 1:
		return &rootfs.LinkedError{Name: name, Links: rootfs.Links(fi)}
	}
	return nil
}

// openErr words an error of gofrs/flock's open of name.
func openErr(name string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ErrGone
	case errors.Is(err, unix.ELOOP):
		return &rootfs.NotRegularError{Name: name, Mode: fs.ModeSymlink}
	}
	return fmt.Errorf("lock %s: %w", name, err)
}

// held wraps a lock gofrs/flock took on name, once it is proven to be the
// regular, single-link file at name; ErrGone (and nothing held) if not.
func held(fl *flock.Flock, dir *os.Root, name string) (*Lock, error) {
	d, err := dir.OpenRoot(".")
	if err != nil {
		_ = fl.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	l := &Lock{fl: fl, dir: d, name: name}
	if err := l.atName(); err != nil {
		_ = l.Release()
		return nil, err
	}
	return l, nil
}

// atName checks that the locked file is the regular, single-link file at
// the lock's name: ErrGone if it is not (the last holder removed it, a
// second link is being made, or something was swapped in).
func (l *Lock) atName() error {
	fi, err := l.Stat()
	if err != nil {
		return fmt.Errorf("stat lock %s: %w", l.name, err)
	}
	if !fi.Mode().IsRegular() || rootfs.Links(fi) != 1 {
		return ErrGone
	}
	same, err := l.StillAtName()
	if err != nil {
		return err
	}
	if !same {
		return ErrGone
	}
	return nil
}

// Take takes over the existing lock file name if nobody holds it. It
// returns ErrBusy if a living process holds it, and ErrGone if the file no
// longer exists or was removed while we were locking it.
func Take(dir *os.Root, name string) (*Lock, error) {
	if err := lockable(dir, name); err != nil {
		return nil, err
	}
	fl := pathFlock(dir, name)
	ok, err := fl.TryLock()
	if err != nil {
		return nil, openErr(name, err)
	}
	if !ok {
		return nil, ErrBusy
	}
	// The last holder removes the file before closing it. If that happened
	// between our open and our flock, we hold a lock on an orphaned inode.
	return held(fl, dir, name)
}

// Acquire waits up to timeout for the exclusive lock on the existing lock
// file name. A contended wait blocks in the kernel (flock without
// LOCK_NB), so waiters cost no CPU and the lock passes on as soon as it is
// released. onWait, if not nil, runs once when the lock turns out to be
// busy. ErrGone: name does not exist, or was removed or replaced while we
// waited (the caller looks again at what is there now).
func Acquire(ctx context.Context, dir *os.Root, name string, timeout time.Duration, onWait func()) (*Lock, error) {
	if err := lockable(dir, name); err != nil {
		return nil, err
	}
	fl := pathFlock(dir, name)
	ok, err := fl.TryLock()
	if err != nil {
		return nil, openErr(name, err)
	}
	if !ok {
		if onWait != nil {
			onWait()
		}
		if err := waitLock(ctx, fl, false, timeout); err != nil {
			if errors.Is(err, ErrTimeout) || ctx.Err() != nil {
				return nil, err
			}
			return nil, openErr(name, err)
		}
	}
	return held(fl, dir, name)
}

// waitLock blocks until fl is locked (shared or exclusive), the timeout
// passes, or ctx ends. A blocking flock cannot be cancelled: on timeout or
// cancellation the waiting goroutine is abandoned with fl, and lets go of
// the lock itself if it ever gets it. The caller must not use fl again
// unless waitLock returned nil.
func waitLock(ctx context.Context, fl *flock.Flock, shared bool, timeout time.Duration) error {
	lock := fl.Lock
	if shared {
		lock = fl.RLock
	}
	var (
		mu        sync.Mutex
		abandoned bool
		got       = make(chan error, 1)
	)
	go func() {
		err := lock()
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			_ = fl.Close()
			return
		}
		got <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var why error
	select {
	case err := <-got:
		return err
	case <-timer.C:
		why = ErrTimeout
	case <-ctx.Done():
		why = ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case <-got:
		// Locked just as we gave up: let it go again.
		_ = fl.Close()
	default:
		abandoned = true
	}
	return why
}

// DirLock is a flock on a directory itself.
type DirLock struct{ fl *flock.Flock }

// AcquireDir waits up to timeout for a lock on the directory at path,
// shared or exclusive, like Acquire. The caller proves that the directory
// it locked is the one it meant (Stat).
func AcquireDir(ctx context.Context, path string, shared bool, timeout time.Duration) (*DirLock, error) {
	fl := flock.New(path, flock.SetFlag(os.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK))
	try := fl.TryLock
	if shared {
		try = fl.TryRLock
	}
	ok, err := try()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !ok {
		if err := waitLock(ctx, fl, shared, timeout); err != nil {
			if errors.Is(err, ErrTimeout) || ctx.Err() != nil {
				return nil, err
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
	return &DirLock{fl: fl}, nil
}

// Stat describes the locked directory.
func (l *DirLock) Stat() (os.FileInfo, error) { return l.fl.Stat() }

// Release unlocks the directory.
func (l *DirLock) Release() error { return l.fl.Close() }

// createTries bounds CreateTemp's attempts at a fresh temporary name.
const createTries = 10

// CreateTemp creates a fresh file beside name, under a temporary name
// (".<name><digits>": listings skip dot-files, recovery sweeps them), and
// locks it. It is the first half of making a lock file appear at its name
// already locked, so that nobody can lock it before its creator does;
// Publish is the second.
func CreateTemp(dir *os.Root, name string, perm os.FileMode) (*Lock, error) {
	var err error
	for range createTries {
		tmp := "." + name + strconv.FormatUint(rand.Uint64(), 10)
		var f *os.File
		f, err = rootfs.Open(dir, tmp, os.O_RDONLY|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create lock %s: %w", name, err)
		}
		_ = f.Close()
		var l *Lock
		if l, err = Take(dir, tmp); err == nil {
			return l, nil
		}
		_ = dir.Remove(tmp) // swept away or locked by a sweeper: try another
	}
	return nil, fmt.Errorf("create lock %s: %w", name, err)
}

// Publish gives a lock made by CreateTemp its name, still locked: the file
// is linked at name, which must not exist (fs.ErrExist: someone published
// one first), and its temporary name goes. Until then, whoever opens name
// sees a second link and lets go again (ErrGone).
func (l *Lock) Publish(name string) error {
	if err := l.dir.Link(l.name, name); err != nil {
		return err
	}
	_ = l.dir.Remove(l.name)
	l.name = name
	return nil
}

// LockData locks name, a data file that is also its own lock (the index
// of finished runs), shared or exclusive, and proves that what it locked
// is data, the caller's descriptor of that file, still at name: ErrGone if
// name now holds another file (the caller opens it again). It never blocks
// in the kernel: it polls, backing off from 50µs to 10ms, for up to
// timeout, so that a holder that is slow (or stopped) costs a bounded
// wait, never a hang. ErrTimeout: the lock was still busy.
func LockData(dir *os.Root, name string, data *os.File, exclusive bool, timeout time.Duration) (*Lock, error) {
	fl := pathFlock(dir, name)
	try := fl.TryRLock
	if exclusive {
		try = fl.TryLock
	}
	deadline := time.Now().Add(timeout)
	for delay := 50 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		ok, err := try()
		if err != nil {
			return nil, openErr(name, err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return nil, ErrTimeout
		}
		time.Sleep(delay)
	}
	l, err := held(fl, dir, name)
	if err != nil {
		return nil, err
	}
	locked, err := l.Stat()
	if err == nil {
		var fi os.FileInfo
		if fi, err = data.Stat(); err == nil && !os.SameFile(locked, fi) {
			err = ErrGone
		}
	}
	if err != nil {
		_ = l.Release()
		return nil, err
	}
	return l, nil
}
