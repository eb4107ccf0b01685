package lockfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"github.com/crew-dev/crew/internal/failpoint"
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

// TimeoutError reports that the admission lock stayed busy for too long.
type TimeoutError struct {
	Path    string
	Waited  time.Duration
	Holder  Holder
	HoldErr error // why the holder note could not be read, if it could not
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("timed out after %s waiting for the admission lock %s, held by %s; "+
		"if that process is stuck, stop it (the lock is released when it exits), or raise --lock-timeout",
		e.Waited, e.Path, e.Holder)
}

// AdmissionLock is the machine-wide mutex around admission decisions.
type AdmissionLock struct {
	fl         *flock.Flock
	holderPath string
}

// AcquireAdmission takes the exclusive lock on lockPath, waiting up to
// timeout. The lock file is created if missing and never deleted. Once the
// lock is held, a note naming this process is written to holderPath so that
// a waiter who times out can say who is in the way.
//
// A contended wait blocks in the kernel (flock without LOCK_NB), so dozens
// of waiters cost no CPU and the lock passes on as soon as it is released;
// polling with LOCK_NB made 64 contenders on 2 cores spend the machine on
// retries. A blocking flock cannot be cancelled, so on timeout the waiting
// goroutine is abandoned and releases the lock itself if it ever gets it.
func AcquireAdmission(ctx context.Context, lockPath, holderPath string, timeout time.Duration) (*AdmissionLock, error) {
	fl := flock.New(lockPath)
	ok, err := fl.TryLock()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", lockPath, err)
	}
	if !ok {
		failpoint.Hit("admission-contended")
		start := time.Now()
		if err := waitLock(ctx, fl, timeout); err != nil {
			if errors.Is(err, errLockTimeout) {
				h, herr := ReadHolder(holderPath)
				return nil, &TimeoutError{Path: lockPath, Waited: time.Since(start).Round(time.Millisecond), Holder: h, HoldErr: herr}
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("waiting for the admission lock %s: %w", lockPath, ctx.Err())
			}
			return nil, fmt.Errorf("lock %s: %w", lockPath, err)
		}
	}
	l := &AdmissionLock{fl: fl, holderPath: holderPath}
	if err := writeHolder(holderPath); err != nil {
		_ = fl.Close()
		return nil, err
	}
	return l, nil
}

var errLockTimeout = errors.New("timed out")

// waitLock blocks until fl is locked, the timeout passes, or ctx ends.
func waitLock(ctx context.Context, fl *flock.Flock, timeout time.Duration) error {
	var (
		mu        sync.Mutex
		abandoned bool
		got       = make(chan error, 1)
	)
	go func() {
		err := fl.Lock() // blocking; retries on EINTR
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			_ = fl.Close() // releases the lock if we got it after all
			return
		}
		got <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var why error
	select {
	case err := <-got:
		if err != nil {
			_ = fl.Close()
		}
		return err
	case <-timer.C:
		why = errLockTimeout
	case <-ctx.Done():
		why = ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	abandoned = true
	select {
	case err := <-got:
		// Acquired just as we gave up: let it go again.
		if err == nil {
			_ = fl.Close()
		}
	default:
	}
	return why
}

// Release unlocks. The lock file stays: deleting it would let a second
// process lock a fresh file at the same path while a third still waits on
// the old one.
func (l *AdmissionLock) Release() error {
	if err := l.fl.Unlock(); err != nil {
		return fmt.Errorf("unlock %s: %w", l.fl.Path(), err)
	}
	return nil
}

func writeHolder(path string) error {
	host, _ := os.Hostname()
	note := fmt.Sprintf("%d %s %s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339Nano), host)
	buf := []byte(note + strings.Repeat(" ", max(0, holderSize-len(note))))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("write admission holder note: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("write admission holder note %s: %w", path, err)
	}
	return nil
}

// ReadHolder reads the note the current (or last) holder wrote.
func ReadHolder(path string) (Holder, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Holder{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.SplitN(line, " ", 3)
	if len(fields) != 3 {
		return Holder{}, fmt.Errorf("holder note %s is malformed", path)
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil {
		return Holder{}, fmt.Errorf("holder note %s: bad pid: %w", path, err)
	}
	since, err := time.Parse(time.RFC3339Nano, fields[1])
	if err != nil {
		return Holder{}, fmt.Errorf("holder note %s: bad time: %w", path, err)
	}
	return Holder{PID: pid, Host: strings.TrimSpace(fields[2]), Since: since}, nil
}
