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

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/rootfs"
)

// holderSize is the fixed width of the holder note, so a rewrite with
// pwrite never leaves a longer older note's tail behind.
const holderSize = 256

// Holder describes who holds the admission lock, as that holder wrote it.
type Holder struct {
	PID   int
	Host  string
	Since time.Time
}

func (h Holder) String() string {
	if h.PID == 0 {
		return "an unknown process (no holder note)"
	}
	return fmt.Sprintf("pid %d on host %s since %s", h.PID, h.Host, h.Since.UTC().Format(time.RFC3339))
}

// LockTimeoutError reports that the admission lock stayed busy too long.
type LockTimeoutError struct {
	Path    string
	Waited  time.Duration
	Holder  Holder
	HoldErr error // why the holder note could not be read, if it could not
}

func (e *LockTimeoutError) Error() string {
	return fmt.Sprintf("timed out after %s waiting for the admission lock on the state root %s, held by %s; "+
		"if that process is stuck, stop it (the lock is released when it exits), or raise --lock-timeout",
		e.Waited, e.Path, e.Holder)
}

// Admission is the held admission lock: the machine-wide critical section
// around every admission decision. Writes that must happen inside it (the
// reservation, a new ticket, the config, the leftover sweep) are methods
// of Admission, so they cannot be made without it.
type Admission struct {
	s    *Store
	lock *lockfs.DirLock // nil when the admission-lock failpoint skips it
}

// maxRootSwaps bounds how often LockAdmission starts over because the
// directory it locked is no longer the state root at its path.
const maxRootSwaps = 10

// LockAdmission takes the admission lock, waiting up to timeout.
//
// The admission lock is a flock on the state root directory itself, not on
// a file inside it: a lock file can be deleted (or its directory removed)
// while a process holds it, and the next process would then lock a fresh
// file and be inside at the same time. A directory cannot be removed while
// it holds anything. Once the lock is held, the directory is checked to
// still be the one at the state root's path (a root moved aside and made
// anew is a different state root: crew starts over on the new one), and a
// note naming this process is written so that a waiter who times out can
// say who is in the way.
func (s *Store) LockAdmission(ctx context.Context, timeout time.Duration) (*Admission, error) {
	if failpoint.Skip("admission-lock") {
		return &Admission{s: s}, nil // test builds only: prove the race tests can fail
	}
	start := time.Now()
	for swaps := 0; ; swaps++ {
		if err := s.Ensure(); err != nil {
			return nil, err
		}
		root, err := s.openRoot()
		if err != nil {
			return nil, err
		}
		remaining := max(timeout-time.Since(start), 0)
		l, err := lockfs.AcquireDir(ctx, root, remaining, func() { failpoint.Hit("admission-contended") })
		switch {
		case errors.Is(err, lockfs.ErrTimeout):
			h, herr := s.readHolder()
			return nil, &LockTimeoutError{Path: s.path, Waited: time.Since(start).Round(time.Millisecond), Holder: h, HoldErr: herr}
		case ctx.Err() != nil:
			return nil, fmt.Errorf("waiting for the admission lock on %s: %w", s.path, ctx.Err())
		case err != nil:
			return nil, fmt.Errorf("admission lock on %s: %w", s.path, unwrapPath(err))
		}
		if s.lockedRootAtPath(l) {
			a := &Admission{s: s, lock: l}
			if err := s.writeHolder(); err != nil {
				a.Release()
				return nil, err
			}
			return a, nil
		}
		_ = l.Release()
		s.reopen()
		if swaps == maxRootSwaps {
			return nil, fmt.Errorf("the state root %s keeps being replaced while crew locks it", s.path)
		}
	}
}

// lockedRootAtPath reports whether the locked directory is the one at the
// state root's path now.
func (s *Store) lockedRootAtPath(l *lockfs.DirLock) bool {
	held, err := l.File().Stat()
	if err != nil {
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
}

// Release leaves the critical section.
func (a *Admission) Release() {
	if a.lock != nil {
		_ = a.lock.Release()
		a.lock = nil
	}
}

func (s *Store) writeHolder() error {
	host, _ := os.Hostname()
	note := fmt.Sprintf("%d %s %s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339Nano), host)
	buf := []byte(note + strings.Repeat(" ", max(0, holderSize-len(note))))
	dir, err := s.dir(locksDir)
	if err != nil {
		return fmt.Errorf("write admission holder note: %w", err)
	}
	defer dir.Close()
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
func (s *Store) readHolder() (Holder, error) {
	dir, err := s.dir(locksDir)
	if err != nil {
		return Holder{}, err
	}
	defer dir.Close()
	f, err := rootfs.Open(dir, holderName, os.O_RDONLY, 0)
	if err != nil {
		return Holder{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, holderSize))
	if err != nil {
		return Holder{}, err
	}
	return ParseHolder(string(b))
}

// ParseHolder parses a holder note.
func ParseHolder(note string) (Holder, error) {
	line, _, _ := strings.Cut(note, "\n")
	fields := strings.SplitN(line, " ", 3)
	if len(fields) != 3 {
		return Holder{}, errors.New("holder note is malformed")
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil {
		return Holder{}, fmt.Errorf("holder note: bad pid: %w", err)
	}
	since, err := time.Parse(time.RFC3339Nano, fields[1])
	if err != nil {
		return Holder{}, fmt.Errorf("holder note: bad time: %w", err)
	}
	return Holder{PID: pid, Host: strings.TrimSpace(fields[2]), Since: since}, nil
}
