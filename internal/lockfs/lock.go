package lockfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/gofrs/flock"

	"github.com/crew-dev/crew/internal/rootfs"
)

// ErrBusy means another open file description holds the lock.
var ErrBusy = errors.New("lock is held by a living process")

// ErrGone means the lock file vanished (or was replaced) while we locked
// it: whoever held it finished and removed it.
var ErrGone = errors.New("lock file was removed by its last holder")

// ErrTimeout is a blocking acquisition that ran out of time.
var ErrTimeout = errors.New("timed out waiting for the lock")

// Lock is a flock this process holds on a lock file of dir. It is held in
// one of two ways, and the difference is whether it can be handed on:
//
//   - through github.com/gofrs/flock (Take, Acquire, CreateTemp, LockData),
//     which opens the file by path and keeps its descriptor to itself. That
//     is every lock crew takes for itself alone: the admission lock, a
//     fence on a dead run, a dead waiter's ticket, the index of finished
//     runs.
//   - on a descriptor crew opened itself (Create, Adopt), for the locks a
//     child process inherits: a run's owner lock (the command gets it as fd
//     3) and its supervisor lock (a detached supervisor gets it).
//     gofrs/flock v0.13 has no way to hand out its descriptor, and a second
//     descriptor of the same file would be a second open file description,
//     which conflicts with the first instead of sharing its lock.
//
// A Lock keeps a handle on its directory of its own, for as long as it is
// held, so callers may close theirs.
type Lock struct {
	fl   *flock.Flock // held through gofrs/flock; nil for a descriptor of our own
	f    *os.File     // our own descriptor; nil when fl holds the lock
	dir  *os.Root
	name string
}

// own wraps a locked descriptor of our own with a directory handle of its
// own.
func own(f *os.File, dir *os.Root, name string) (*Lock, error) {
	d, err := dir.OpenRoot(".")
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return &Lock{f: f, dir: d, name: name}, nil
}

// Stat describes the locked file (whatever its name is now).
func (l *Lock) Stat() (os.FileInfo, error) {
	if l.fl != nil {
		return l.fl.Stat()
	}
	return l.f.Stat()
}

// File is the locked descriptor, for a child process to inherit; nil for a
// lock held through gofrs/flock, which cannot be handed on.
func (l *Lock) File() *os.File { return l.f }

// ReadAt reads the locked file's content (a run's owner lock file keeps
// room for, and possibly holds, the run's outcome). A lock held through
// gofrs/flock has no descriptor to read through: the file is opened again
// through the root, and must be the locked one.
func (l *Lock) ReadAt(p []byte, off int64) (int, error) {
	if l.f != nil {
		return l.f.ReadAt(p, off)
	}
	f, err := rootfs.Open(l.dir, l.name, os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	locked, err := l.Stat()
	if err != nil {
		return 0, err
	}
	if fi, err := f.Stat(); err != nil || !os.SameFile(fi, locked) {
		return 0, fmt.Errorf("%s is no longer the locked file", l.name)
	}
	return f.ReadAt(p, off)
}

// Name is the lock file's name in its directory.
func (l *Lock) Name() string { return l.name }

// StillAtName reports whether the locked file is the one at its name (and
// not an inode someone removed or replaced).
func (l *Lock) StillAtName() (bool, error) {
	held, err := l.Stat()
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

// Release drops this process's hold. A child that inherited the descriptor
// keeps the lock held.
func (l *Lock) Release() error {
	var err error
	if l.fl != nil {
		err = l.fl.Close() // unlocks, then closes the descriptor
	} else {
		err = l.f.Close()
	}
	_ = l.dir.Close()
	if err != nil {
		return fmt.Errorf("release lock %s: %w", l.name, err)
	}
	return nil
}

// RemoveUnseenAndRelease is RemoveAndRelease for a lock file in a
// directory others watch with inotify for closes (a state root's owners/,
// where a lock still in place when its last holder closes it tells of a
// death): it moves the file into aside, a subdirectory of its directory,
// and removes it there before it lets go. A watch on a directory hears of
// the last close of a file removed from it (its dentry keeps the parent),
// but not of one moved out of it first: a normal end then wakes nobody.
// If aside cannot take it (missing, not a directory), the file is removed
// where it is.
func (l *Lock) RemoveUnseenAndRelease(aside string) error {
	moved := aside + "/" + l.name
	if l.dir.Rename(l.name, moved) != nil {
		return l.RemoveAndRelease()
	}
	rmErr := l.dir.Remove(moved)
	relErr := l.Release()
	if rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
		return fmt.Errorf("remove lock %s: %w", moved, rmErr)
	}
	return relErr
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
