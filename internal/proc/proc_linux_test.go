//go:build linux

package proc

// The test binary re-executes itself as a helper process
// (CREW_PROC_HELPER=<mode>:<path>) that holds, or merely opens, a file,
// prints "ready" and sleeps until its stdin closes. Helpers are the test's
// own children: the test signals them through exec.Cmd, never by a bare
// pid, and reaps them in t.Cleanup.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

const helperEnv = "CREW_PROC_HELPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHelper(spec))
	}
	os.Exit(m.Run())
}

// runHelper: "lock" takes an exclusive flock on path; "open" only opens
// it; "lock-fork" locks it and starts a child (sleep) in the same process
// group that inherits the locked descriptor.
func runHelper(spec string) int {
	mode, path, _ := strings.Cut(spec, ":")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if mode != "open" {
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			fmt.Println("error:", err)
			return 1
		}
	}
	if mode == "lock-fork" {
		child := exec.Command("sleep", "60")
		child.ExtraFiles = []*os.File{f}
		if err := child.Start(); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("child", child.Process.Pid)
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the test closes stdin
	return 0
}

type helper struct {
	cmd      *exec.Cmd
	childPID int
}

// startHelper starts a helper; ownGroup puts it in a process group of its
// own.
func startHelper(t *testing.T, mode, path string, ownGroup bool) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode+":"+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: ownGroup}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	h := &helper{cmd: cmd}
	t.Cleanup(func() {
		_ = stdin.Close()
		if ownGroup {
			// Our unreaped child leads the group: its id is ours to signal.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		line := lines.Text()
		if _, err := fmt.Sscanf(line, "child %d", &h.childPID); err == nil {
			continue
		}
		require.Equal(t, "ready", line)
		return h
	}
	t.Fatalf("helper %s ended before it was ready", mode)
	return nil
}

func (h *helper) pid() int { return h.cmd.Process.Pid }

func fileID(t *testing.T, path string) FileID {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	id, err := IDOf(f)
	require.NoError(t, err)
	return id
}

func pids(hs []Holder) []int {
	var out []int
	for _, h := range hs {
		out = append(out, h.PID)
	}
	return out
}

func holderOf(t *testing.T, id FileID, pid int) Holder {
	t.Helper()
	scan, err := FindHolders(id)
	require.NoError(t, err)
	for _, h := range scan.Of(id) {
		if h.PID == pid {
			return h
		}
	}
	t.Fatalf("pid %d not found holding the file; holders: %v", pid, pids(scan.Holders))
	return Holder{}
}

// TestFindHoldersSeesOnlyLockHolders: a process that holds the flock is
// found, one that merely has the file open is not, and a lock on another
// file does not count.
func TestFindHoldersSeesOnlyLockHolders(t *testing.T) {
	dir := t.TempDir()
	path, other := filepath.Join(dir, "run.lock"), filepath.Join(dir, "other.lock")
	holder := startHelper(t, "lock", path, true)
	opener := startHelper(t, "open", path, true)
	otherHolder := startHelper(t, "lock", other, true)

	id := fileID(t, path)
	scan, err := FindHolders(id)
	require.NoError(t, err)
	assert.Equal(t, []int{holder.pid()}, pids(scan.Holders))
	h := scan.Holders[0]
	assert.Equal(t, id, h.File)
	assert.Equal(t, holder.pid(), h.PGID, "the helper leads its own group")
	assert.NotZero(t, h.Start)
	assert.NotContains(t, pids(scan.Holders), opener.pid())

	both, err := FindHolders(id, fileID(t, other))
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{holder.pid(), otherHolder.pid()}, pids(both.Holders))
	assert.Equal(t, []int{otherHolder.pid()}, pids(both.Of(fileID(t, other))))
}

// TestFindHoldersSeesInheritedLock: a child that inherited the locked
// descriptor holds the lock too (as a run's command does).
func TestFindHoldersSeesInheritedLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.lock")
	h := startHelper(t, "lock-fork", path, true)
	require.NotZero(t, h.childPID)
	scan, err := FindHolders(fileID(t, path))
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{h.pid(), h.childPID}, pids(scan.Holders))
}

// TestPinRefusesWhatDoesNotHold: a pid that does not hold the lock (an
// opener, or a holder whose start time differs: a reused pid) cannot be
// pinned.
func TestPinRefusesWhatDoesNotHold(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.lock")
	holder := startHelper(t, "lock", path, true)
	opener := startHelper(t, "open", path, true)
	id := fileID(t, path)
	h := holderOf(t, id, holder.pid())

	_, err := Pin(Holder{PID: opener.pid(), File: id, Start: h.Start})
	assert.ErrorIs(t, err, ErrGone, "an opener holds no lock")
	_, err = Pin(Holder{PID: holder.pid(), File: id, Start: h.Start + 1})
	assert.ErrorIs(t, err, ErrGone, "another start time is another process")
	p, err := Pin(h)
	require.NoError(t, err)
	defer p.Close()
	assert.True(t, p.Holds())
	assert.Equal(t, holder.pid(), p.PID())
}

// TestSignalReachesThePinnedProcessOnly: a pinned holder is signalled
// through its pidfd; once it is gone, signalling it fails with ErrGone.
func TestSignalReachesThePinnedProcessOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.lock")
	holder := startHelper(t, "lock", path, true)
	bystander := startHelper(t, "open", path, true)
	p, err := Pin(holderOf(t, fileID(t, path), holder.pid()))
	require.NoError(t, err)
	defer p.Close()

	require.NoError(t, p.Signal(syscall.SIGKILL))
	ws := waitExit(t, holder)
	assert.Equal(t, syscall.SIGKILL, ws.Signal())
	assert.ErrorIs(t, p.Signal(syscall.SIGKILL), ErrGone, "reaped: the pidfd reaches nobody")
	assert.False(t, p.Holds())
	assert.NoError(t, bystander.cmd.Process.Signal(syscall.Signal(0)), "the bystander lives")
}

// TestSignalGroupKillsTheWholeGroup: the group of a pinned holder is
// signalled, members that hold nothing included.
func TestSignalGroupKillsTheWholeGroup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.lock")
	h := startHelper(t, "lock-fork", path, true)
	p, err := Pin(holderOf(t, fileID(t, path), h.childPID))
	require.NoError(t, err)
	defer p.Close()
	pgid, err := p.SignalGroup(syscall.SIGKILL)
	require.NoError(t, err)
	assert.Equal(t, h.pid(), pgid)
	ws := waitExit(t, h)
	assert.Equal(t, syscall.SIGKILL, ws.Signal(), "the group leader got the signal too")
	eventually(t, "the member to die", func() bool { return !p.Holds() })
	_, err = p.SignalGroup(syscall.SIGKILL)
	assert.ErrorIs(t, err, ErrGone, "a dead member proves nothing about the group")
}

// TestSignalGroupRefusesCrewsOwnGroup: a holder in crew's own process
// group is never signalled through its group.
func TestSignalGroupRefusesCrewsOwnGroup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.lock")
	h := startHelper(t, "lock", path, false) // in the test's own group
	p, err := Pin(holderOf(t, fileID(t, path), h.pid()))
	require.NoError(t, err)
	defer p.Close()
	_, err = p.SignalGroup(syscall.SIGTERM)
	assert.ErrorContains(t, err, "refusing to signal crew's own process group")
	assert.True(t, p.Holds(), "nothing was signalled")
	for _, bad := range []int{-1, 0, 1, unix.Getpgrp()} {
		assert.Error(t, safeGroup(bad), "pgid %d", bad)
	}
}

// TestGroupHasOthers tells a group with a living member besides the
// leader from one without.
func TestGroupHasOthers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.lock")
	alone := startHelper(t, "lock", path+"1", true)
	pair := startHelper(t, "lock-fork", path+"2", true)
	others, err := GroupHasOthers(alone.pid(), alone.pid())
	require.NoError(t, err)
	assert.False(t, others)
	others, err = GroupHasOthers(pair.pid(), pair.pid())
	require.NoError(t, err)
	assert.True(t, others)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitExit(t *testing.T, h *helper) syscall.WaitStatus {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = h.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("helper did not exit")
	}
	ws, _ := h.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ws
}

// BenchmarkFindHolders is the cost of one full scan of the process table.
func BenchmarkFindHolders(b *testing.B) {
	f, err := os.CreateTemp(b.TempDir(), "lock")
	require.NoError(b, err)
	defer f.Close()
	id, err := IDOf(f)
	require.NoError(b, err)
	pids, _ := listPIDs()
	b.ReportMetric(float64(len(pids)), "procs")
	for b.Loop() {
		if _, err := FindHolders(id); err != nil {
			b.Fatal(err)
		}
	}
}
