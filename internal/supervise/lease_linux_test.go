//go:build linux

package supervise

// A run whose slot is a lease (issue 26, item 1), with a lease and guards
// of the test's own: no attempt starts on a lease that is not fresh, and
// a command whose guard died before it joined the guard's group is ended
// with its whole group. The guard's group is a real one, led by a dead
// but unreaped process, as a guard that killed its group and exited
// leaves it until its supervisor reaps it.

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// leasedRun is a run whose claim carries lease l.
type leasedRun struct {
	backend.Run
	l *fakeLease
}

func (r leasedRun) Claim() backend.Claim { return leasedClaim{r.Run.Claim(), r.l} }

type leasedClaim struct {
	backend.Claim
	l *fakeLease
}

func (c leasedClaim) Lease() backend.Lease { return c.l }

// fakeLease is fresh while fresh says so; each Guard call counts, and
// counts as stale if the lease was not fresh.
type fakeLease struct {
	mu           sync.Mutex
	fresh        bool
	calls, stale int
	looks        int // calls of Fresh
	guard        func() backend.Guard
	expired      chan struct{}
}

func (l *fakeLease) Guard() (backend.Guard, error) {
	l.mu.Lock()
	l.calls++
	if !l.fresh {
		l.stale++
	}
	l.mu.Unlock()
	return l.guard(), nil
}

func (l *fakeLease) Fresh() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.looks++
	return l.fresh
}

func (l *fakeLease) looked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.looks
}

func (l *fakeLease) setFresh(v bool) {
	l.mu.Lock()
	l.fresh = v
	l.mu.Unlock()
}

func (l *fakeLease) counts() (calls, stale int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls, l.stale
}

func (l *fakeLease) Expired() <-chan struct{} { return l.expired }

// fakeGuard leads group pgid (a dead, unreaped process's); confirm says
// what Confirm answers, ended runs at End.
type fakeGuard struct {
	pgid    int
	confirm func() error
	ended   func()
	gone    bool
}

func (g *fakeGuard) Pgid() int                        { return g.pgid }
func (g *fakeGuard) PID() int                         { return g.pgid }
func (g *fakeGuard) Confirm() error                   { return g.confirm() }
func (g *fakeGuard) Losing() <-chan backend.LeaseLoss { return nil }
func (g *fakeGuard) Overdue() string                  { return "" }

func (g *fakeGuard) Signal(sig syscall.Signal) error {
	if g.gone {
		return errors.New("test guard: gone")
	}
	return unix.Kill(-g.pgid, sig)
}

func (g *fakeGuard) End() error {
	if g.ended != nil {
		g.ended()
	}
	if g.gone {
		return errors.New("test guard: gone")
	}
	return nil
}

// deadLeader is the id of a new process group whose leader has exited and
// is not reaped: the group exists, and a process can join it, as one can
// join a dead lease guard's before its supervisor reaps it.
func deadLeader(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "exit 0"}, &os.ProcAttr{Sys: &syscall.SysProcAttr{Setpgid: true}})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = p.Wait() })
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			require.NoError(t, err)
			return p.Pid
		}
	}
}

// pidfdOf pins the process whose pid is in file path (once it is there).
func pidfdOf(t *testing.T, path string) int {
	t.Helper()
	awaitFile(t, path)
	var pid int
	for deadline := time.Now().Add(10 * time.Second); pid == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	require.NotZero(t, pid, "no pid in %s", path)
	fd, err := unix.PidfdOpen(pid, 0)
	require.NoError(t, err, "pidfd of %d", pid)
	t.Cleanup(func() {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		_ = unix.Close(fd)
	})
	return fd
}

// exitedWithin reports whether the process of pidfd fd has exited within d.
func exitedWithin(fd int, d time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds())+1)
		if n > 0 {
			return true
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return false
		}
	}
	return false
}

// TestAbandonedLaunchEndsItsWholeGroup: the guard died before the command
// joined its group (its deadline passed during the launch), so Confirm
// fails; the command has meanwhile started a child in that group. crew
// must kill the whole group, not only the command: nothing else would
// stop the child with the lease.
func TestAbandonedLaunchEndsItsWholeGroup(t *testing.T) {
	dir := t.TempDir()
	childPID := filepath.Join(dir, "child.pid")
	req := reserve(t, "sh", "-c", `sleep 60 & echo $! > "$1"; wait`, "x", childPID)
	var child int
	l := &fakeLease{fresh: true, expired: make(chan struct{})}
	l.guard = func() backend.Guard {
		return &fakeGuard{pgid: deadLeader(t), gone: true, confirm: func() error {
			child = pidfdOf(t, childPID) // the command's child runs in the group
			return errors.New("test guard: it exited before the command joined its group")
		}}
	}
	req.Run = leasedRun{req.Run, l}
	err := awaitResult(t, supervise(req))
	var ie *vocab.InternalError
	require.True(t, errors.As(err, &ie), "an internal failure: %v", err)
	assert.Contains(t, err.Error(), "did not confirm the command's group")
	assert.True(t, exitedWithin(child, 10*time.Second), "the command's child outlived the abandoned launch: only the command was killed, not its group")
	final, err := req.Logs.ReadRun(req.Rec.RunID)
	require.NoError(t, err)
	assert.Equal(t, record.Failed, final.State)
	require.NotNil(t, final.ExitCode)
	assert.Equal(t, vocab.ExitInternal, *final.ExitCode)
}

// TestRetryWaitsForAFreshLease: the lease goes unrenewed after attempt 1
// (etcd cut off during the retry delay). Attempt 2 waits until it is
// renewed instead of starting on a lease that could run out while its
// command is being started.
func TestRetryWaitsForAFreshLease(t *testing.T) {
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts")
	req := reserve(t, "sh", "-c", `echo >> "$1"; exit 1`, "x", starts)
	req.Rec.Retries = 1
	noted := make(chan string, 4)
	req.Note = func(n string) { noted <- n }
	l := &fakeLease{fresh: true, expired: make(chan struct{})}
	l.guard = func() backend.Guard {
		// A dead leader's group, for a guard that is alive as far as the
		// supervisor can tell: it confirms, and signalling the group
		// reaches the command. Once attempt 1 is over, etcd stops
		// answering: the lease is no longer fresh.
		return &fakeGuard{pgid: deadLeader(t), confirm: func() error { return nil }, ended: func() { l.setFresh(false) }}
	}
	req.Run = leasedRun{req.Run, l}
	done := supervise(req)

	waiting := false
	for !waiting {
		select {
		case n := <-noted:
			waiting = strings.Contains(n, "waits for a renewal")
		case err := <-done:
			t.Fatalf("the run ended (%v) without waiting for its lease to be renewed", err)
		case <-time.After(20 * time.Second):
			t.Fatal("no word of waiting for the lease")
		}
		calls, stale := l.counts()
		require.Zero(t, stale, "an attempt started on a lease that was not fresh")
		require.Equal(t, 1, calls, "attempt 2 started before the lease was renewed")
	}
	assert.Equal(t, 1, lines(t, starts))
	l.setFresh(true) // renewed
	assert.Equal(t, 1, exitCodeOf(t, awaitResult(t, done)))
	calls, stale := l.counts()
	assert.Equal(t, 2, calls)
	assert.Zero(t, stale, "an attempt started on a lease that was not fresh")
	assert.Equal(t, 2, lines(t, starts))
}

// TestFirstAttemptWaitsForAFreshLease: a lease that missed a renewal just
// before the launch is waited for, not started on; one that expires
// meanwhile fails the run (125) with no command started.
func TestFirstAttemptWaitsForAFreshLease(t *testing.T) {
	alive := func() backend.Guard { return &fakeGuard{pgid: deadLeader(t), confirm: func() error { return nil }} }
	t.Run("Renewed", func(t *testing.T) {
		req := reserve(t, "true")
		l := &fakeLease{expired: make(chan struct{})}
		l.guard = alive
		req.Run = leasedRun{req.Run, l}
		done := supervise(req)
		for deadline := time.Now().Add(10 * time.Second); l.looked() < 3; time.Sleep(5 * time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "the supervisor never looked at its lease")
		}
		calls, stale := l.counts()
		require.Zero(t, stale, "the attempt started on a lease that was not fresh")
		require.Zero(t, calls, "the attempt started before the lease was renewed")
		l.setFresh(true)
		require.NoError(t, awaitResult(t, done))
		calls, stale = l.counts()
		assert.Equal(t, 1, calls)
		assert.Zero(t, stale)
	})
	t.Run("Expired", func(t *testing.T) {
		req := reserve(t, "true")
		l := &fakeLease{expired: make(chan struct{})}
		l.guard = alive
		req.Run = leasedRun{req.Run, l}
		close(l.expired)
		err := awaitResult(t, supervise(req))
		var ie *vocab.InternalError
		require.True(t, errors.As(err, &ie), "an internal failure: %v", err)
		assert.Contains(t, err.Error(), "the run's lease expired before its command could start")
		calls, _ := l.counts()
		assert.Zero(t, calls, "a guard was started on an expired lease")
	})
}
