package lockfs

// What gofrs/flock does not do, and why each is here:
//
//   - Create: a lock that a child process inherits (a run's owner and
//     supervisor locks) must be held on a descriptor crew can hand on, and
//     gofrs/flock does not expose its own. The file is created exclusively
//     through the root (rootfs), with its exact mode.
//   - TakeOwn: Take, for such a lock taken again by its own supervisor
//     (whose next attempt hands it on), to learn whether anyone else holds
//     it.
//   - Adopt: a descriptor this process inherited already holds its lock;
//     there is nothing to open or lock, only to check.
//   - Probe, ProbeFile: the answer must be about the very file whose
//     identity the caller checks, opened once through the root and never
//     through a link; opening it a second time by path (as gofrs/flock
//     does) could probe another file than the one described.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/rootfs"
)

const lockPerm = 0o600

// Create creates name, which must not exist, and locks it on a descriptor
// of our own, which a child may inherit (File). O_EXCL makes the file ours
// alone even if two processes picked the same name.
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
	l, err := own(f, dir, name)
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

// TakeOwn takes over the existing lock file name, as Take does, on a
// descriptor of our own that a child may inherit (File). ErrBusy: a living
// process holds it; ErrGone: it does not exist, or was removed meanwhile.
func TakeOwn(dir *os.Root, name string) (*Lock, error) {
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
	l, err := own(f, dir, name)
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

// Adopt wraps a lock descriptor this process inherited (a detached
// supervisor's run locks). The lock is held already: it belongs to the
// open file description, which the parent shared with us.
func Adopt(f *os.File, dir *os.Root, name string) (*Lock, error) {
	l, err := own(f, dir, name)
	if err != nil {
		return nil, err
	}
	if same, err := l.StillAtName(); err != nil || !same {
		_ = l.dir.Close()
		return nil, fmt.Errorf("inherited descriptor %d is not the lock %s", f.Fd(), name)
	}
	return l, nil
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
