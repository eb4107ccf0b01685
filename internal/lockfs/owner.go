package lockfs

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ErrBusy means another open file description holds the lock.
var ErrBusy = errors.New("lock is held by a living process")

// ErrGone means the lock file vanished (or was replaced) while we locked
// it: whoever held it finished and removed it.
var ErrGone = errors.New("lock file was removed by its last holder")

// OwnerLock is an exclusive flock on a per-run lock file. It is taken on an
// *os.File of our own (not a flock.Flock) so the descriptor can be handed
// to the run's command through exec.Cmd.ExtraFiles: the lock then lives
// until the supervisor and every process of the command are gone.
type OwnerLock struct {
	f    *os.File
	path string
}

// CreateOwner creates path, which must not exist, and locks it. O_EXCL makes
// the run id's lock file ours alone even if two processes picked one id.
func CreateOwner(path string) (*OwnerLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create owner lock: %w", err)
	}
	// Between our create and our flock another process may have opened
	// and locked the file (a finalizer fencing a run), or removed it. Either
	// way it is not ours to use or to delete.
	// A prober (Probe's shared lock, held for microseconds) may have the
	// new file for an instant; only a lock held longer means someone else
	// has taken it.
	for attempt := 0; attempt < 200; attempt++ {
		if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
			break
		}
		time.Sleep(50 * time.Microsecond)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock new owner lock %s: %w", path, err)
	}
	if same, err := samePath(f, path); err != nil || !same {
		_ = f.Close()
		return nil, fmt.Errorf("new owner lock %s was removed while being locked", path)
	}
	return &OwnerLock{f: f, path: path}, nil
}

// TryOwner takes over the existing owner lock at path if nobody holds it.
// It returns ErrBusy if a living process holds it, and ErrGone if the file
// no longer exists or was removed while we were locking it — in both cases
// the caller must not touch the run.
func TryOwner(path string) (*OwnerLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrGone
	}
	if err != nil {
		return nil, fmt.Errorf("open owner lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrBusy
		}
		return nil, fmt.Errorf("lock owner lock %s: %w", path, err)
	}
	// The last holder removes the file before closing it. If that happened
	// between our open and our flock, we hold a lock on an orphaned inode.
	if same, err := samePath(f, path); err != nil || !same {
		_ = f.Close()
		if err != nil {
			return nil, err
		}
		return nil, ErrGone
	}
	return &OwnerLock{f: f, path: path}, nil
}

func samePath(f *os.File, path string) (bool, error) {
	held, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat owner lock: %w", err)
	}
	now, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat owner lock: %w", err)
	}
	return os.SameFile(held, now), nil
}

// Probe reports whether a living process holds the lock at path, without
// creating or modifying anything. It takes a shared lock for an instant,
// so concurrent probes never mistake each other for an owner; a missing
// file means nobody holds it.
func Probe(path string) (held bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open owner lock: %w", err)
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("probe owner lock %s: %w", path, err)
	}
	return false, nil
}

// File is the locked descriptor, for a child process to inherit.
func (o *OwnerLock) File() *os.File { return o.f }

// Path is the lock file's path.
func (o *OwnerLock) Path() string { return o.path }

// Release drops this process's hold. A child that inherited the descriptor
// keeps the lock held.
func (o *OwnerLock) Release() error {
	if err := o.f.Close(); err != nil {
		return fmt.Errorf("release owner lock %s: %w", o.path, err)
	}
	return nil
}

// RemoveAndRelease deletes the lock file and then releases it. Only the
// holder may do this, and only once the run's record is final: removing it
// first means nobody can lock the path again and be mistaken for an owner.
func (o *OwnerLock) RemoveAndRelease() error {
	rmErr := os.Remove(o.path)
	if errors.Is(rmErr, os.ErrNotExist) {
		rmErr = nil
	}
	relErr := o.Release()
	if rmErr != nil {
		return fmt.Errorf("remove owner lock: %w", rmErr)
	}
	return relErr
}

// AdoptOwner wraps a lock descriptor this process inherited (a detached
// supervisor's owner and supervisor locks). The lock is held already: it
// belongs to the open file description, which the parent shared with us.
func AdoptOwner(f *os.File, path string) (*OwnerLock, error) {
	if same, err := samePath(f, path); err != nil || !same {
		return nil, fmt.Errorf("inherited descriptor is not the lock %s", path)
	}
	return &OwnerLock{f: f, path: path}, nil
}
