package runstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"io/fs"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/rootfs"
	"github.com/crew-dev/crew/internal/vocab"
)

// holderSize is the fixed width of the holder note, so a rewrite with
// pwrite never leaves a longer older note's tail behind.
const holderSize = 256

// Admission is the held admission lock: the machine-wide critical section
// around every admission decision. Writes that must happen inside it (the
// reservation, a new ticket, the config, the leftover sweep) are methods
// of Admission, so they cannot be made without it.
type Admission struct {
	s    *Store
	lock *lockfs.Lock    // .locks/dispatch-admission.lock; nil when the admission-lock failpoint skips it
	root *lockfs.DirLock // the state root directory, shared (see LockAdmission)
}

// maxStartOvers bounds how often LockAdmission starts over because what it
// locked is no longer the admission lock of the state root at its path.
const maxStartOvers = 10

// errStartOver: what was locked is no longer what the state root's path
// names; look again.
var errStartOver = errors.New("the admission lock was replaced while being locked")

// LockAdmission takes the admission lock, waiting up to timeout.
//
// The admission lock is an exclusive flock of .locks/dispatch-admission.lock,
// a lock file of its own (no task name can ever name it) that crew creates
// once and never removes or replaces. Once it is held, crew proves that the
// state root's path still names the locked file (same device and inode,
// one link, no symbolic link on the way) and starts over otherwise, so a
// waiter that wakes up on a lock file someone removed or replaced never
// believes it is inside.
//
// Inside, crew also holds the state root directory itself with a shared
// flock. It never keeps two crews apart (shared locks coexist), but a
// process that needs nobody inside takes it exclusively: the one that
// creates the lock file (anew, if someone removed .locks/ while a process
// was inside: it waits until that process has left), and every crew release
// before this one, whose admission lock was an exclusive flock of the state
// root directory. So old and new crew may share a root during an upgrade.
//
// A note naming this process is written beside the lock, so that a waiter
// who times out can say who is in the way.
func (s *Store) LockAdmission(ctx context.Context, timeout time.Duration) (*Admission, error) {
	if failpoint.Skip(failpoint.AdmissionLock) {
		return &Admission{s: s}, nil // test builds only: prove the race tests can fail
	}
	start := time.Now()
	for overs := 0; ; overs++ {
		if err := s.Ensure(); err != nil {
			return nil, err
		}
		a, err := s.lockAdmission(ctx, max(timeout-time.Since(start), 0))
		switch {
		case err == nil:
			if err := s.writeHolder(); err != nil {
				a.Release()
				return nil, err
			}
			return a, nil
		case errors.Is(err, errStartOver):
			s.reopen()
			if overs == maxStartOvers {
				return nil, fmt.Errorf("the admission lock %s keeps being replaced while crew locks it", s.admissionLockPath())
			}
		case errors.Is(err, lockfs.ErrTimeout):
			h, herr := s.readHolder()
			return nil, &vocab.LockTimeoutError{Path: s.path, LockFile: s.admissionLockPath(), Waited: time.Since(start).Round(time.Millisecond), Holder: h, HoldErr: herr}
		case ctx.Err() != nil:
			return nil, fmt.Errorf("waiting for the admission lock %s: %w", s.admissionLockPath(), ctx.Err())
		default:
			return nil, fmt.Errorf("admission lock %s: %w", s.admissionLockPath(), unwrapPath(err))
		}
	}
}

// admissionLockPath is the admission lock file's path, for messages.
func (s *Store) admissionLockPath() string { return s.display(locksDir, admissionLockName) }

// lockAdmission is one try: the lock file, then the state root directory.
func (s *Store) lockAdmission(ctx context.Context, timeout time.Duration) (*Admission, error) {
	deadline := time.Now().Add(timeout)
	locks, err := s.layout(locksDir)
	if err != nil {
		return nil, err
	}
	l, err := lockfs.Acquire(ctx, locks, admissionLockName, timeout, func() { failpoint.Hit(failpoint.AdmissionContended) })
	if errors.Is(err, lockfs.ErrGone) {
		if _, lerr := locks.Lstat(admissionLockName); !errors.Is(lerr, fs.ErrNotExist) {
			return nil, errStartOver // replaced while we waited: lock what is there now
		}
		l, err = s.createAdmissionLock(ctx, locks, time.Until(deadline))
	}
	var notRegular *rootfs.NotRegularError
	var linked *rootfs.LinkedError
	if errors.As(err, &notRegular) || errors.As(err, &linked) {
		// Something crew did not make stands at the lock's name: move it
		// aside, and make the lock file anew.
		why := fmt.Sprintf("%v; crew keeps its admission lock there, so it moved this aside", err)
		if _, qerr := s.quarantine(locksDir, admissionLockName, why, "crew (taking the admission lock)"); qerr != nil {
			return nil, errors.Join(err, qerr)
		}
		return nil, errStartOver
	}
	if err != nil {
		return nil, err
	}
	root, err := lockfs.AcquireDir(ctx, s.path, true, time.Until(deadline))
	if err != nil {
		_ = l.Release()
		return nil, err
	}
	a := &Admission{s: s, lock: l, root: root}
	if !s.isStateRoot(root) {
		a.Release()
		return nil, errStartOver // the state root was moved aside and made anew
	}
	if same, err := l.StillAtName(); err != nil || !same {
		a.Release()
		return nil, errStartOver
	}
	return a, nil
}

// createAdmissionLock makes the admission lock file, which does not exist:
// a fresh file, locked under a temporary name, appears at its name only
// once nobody is inside admission (the state root directory is held
// exclusively for that instant: see LockAdmission), already locked by its
// creator. errStartOver if another process made it first.
func (s *Store) createAdmissionLock(ctx context.Context, locks *os.Root, timeout time.Duration) (*lockfs.Lock, error) {
	deadline := time.Now().Add(timeout)
	l, err := lockfs.CreateTemp(locks, admissionLockName, s.filePerm())
	if err != nil {
		return nil, err
	}
	fence, err := lockfs.AcquireDir(ctx, s.path, false, time.Until(deadline))
	if err != nil {
		_ = l.RemoveAndRelease()
		return nil, err
	}
	defer fence.Release()
	if !s.isStateRoot(fence) {
		_ = l.RemoveAndRelease()
		return nil, errStartOver
	}
	if err := l.Publish(admissionLockName); err != nil {
		_ = l.RemoveAndRelease()
		if errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist) {
			return nil, errStartOver // made by another; or our file swept away
		}
		return nil, fmt.Errorf("create %s: %w", s.admissionLockPath(), unwrapPath(err))
	}
	return l, nil
}

// isStateRoot reports whether the locked directory is the state root this
// store has open, and still the one at the state root's path.
func (s *Store) isStateRoot(l *lockfs.DirLock) bool {
	held, err := l.Stat()
	if err != nil {
		return false
	}
	root, err := s.openRoot()
	if err != nil {
		return false
	}
	opened, err := root.Stat(".")
	if err != nil || !os.SameFile(held, opened) {
		return false
	}
	now, err := os.Stat(s.path)
	return err == nil && os.SameFile(held, now)
}

// reopen drops the handle on the state root, so the next access opens
// whatever directory is at its path now.
func (s *Store) reopen() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != nil {
		s.root.Close()
		s.root = nil
	}
	for rel, k := range s.kept { // children of the old root: another goroutine may hold one
		s.retired = append(s.retired, k.root)
		delete(s.kept, rel)
	}
}

// Release leaves the critical section.
func (a *Admission) Release() {
	if a.root != nil {
		_ = a.root.Release()
		a.root = nil
	}
	if a.lock != nil {
		_ = a.lock.Release()
		a.lock = nil
	}
}

func (s *Store) writeHolder() error {
	host, _ := os.Hostname()
	note := fmt.Sprintf("%d %s %s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339Nano), host)
	buf := []byte(note + strings.Repeat(" ", max(0, holderSize-len(note))))
	dir, err := s.layout(locksDir)
	if err != nil {
		return fmt.Errorf("write admission holder note: %w", err)
	}
	f, err := s.openInPlace(locksDir, dir, holderName, os.O_WRONLY|os.O_CREATE, "crew (taking the admission lock)")
	if err != nil {
		return fmt.Errorf("write admission holder note %s: %w", s.display(locksDir, holderName), unwrapPath(err))
	}
	defer f.Close()
	// Written in place (one pwrite, no new file per admission) and cut to
	// its fixed size, so whatever was there before leaves no tail.
	if _, err := f.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("write admission holder note %s: %w", s.display(locksDir, holderName), err)
	}
	if err := f.Truncate(int64(len(buf))); err != nil {
		return fmt.Errorf("write admission holder note %s: %w", s.display(locksDir, holderName), err)
	}
	return nil
}

// readHolder reads the note the current (or last) holder wrote: its first
// line, within the note's fixed size.
func (s *Store) readHolder() (vocab.Holder, error) {
	dir, err := s.layout(locksDir)
	if err != nil {
		return vocab.Holder{}, err
	}
	f, err := rootfs.Open(dir, holderName, os.O_RDONLY, 0)
	if err != nil {
		return vocab.Holder{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, holderSize))
	if err != nil {
		return vocab.Holder{}, err
	}
	return ParseHolder(string(b))
}

// ParseHolder parses a holder note.
func ParseHolder(note string) (vocab.Holder, error) {
	line, _, _ := strings.Cut(note, "\n")
	fields := strings.SplitN(line, " ", 3)
	if len(fields) != 3 {
		return vocab.Holder{}, errors.New("holder note is malformed")
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil {
		return vocab.Holder{}, fmt.Errorf("holder note: bad pid: %w", err)
	}
	since, err := time.Parse(time.RFC3339Nano, fields[1])
	if err != nil {
		return vocab.Holder{}, fmt.Errorf("holder note: bad time: %w", err)
	}
	return vocab.Holder{PID: pid, Host: strings.TrimSpace(fields[2]), Since: since}, nil
}
