package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

func TestStartSucceeds(t *testing.T) {
	d := newDispatcher(t)
	req, stdout, stderr := startRequest("hello", "sh", "-c", "echo out; echo err >&2")
	code, id, err := startCode(d, req)
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "out\n", stdout.String())
	assert.Equal(t, "err\n", stderr.String())

	rec, err := d.Logs.ReadRun(id)
	require.NoError(t, err)
	assert.Equal(t, record.Succeeded, rec.State)
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 0, *rec.ExitCode)
	assert.Empty(t, rec.Reason)
	require.NotNil(t, rec.StartedAt)
	require.NotNil(t, rec.FinishedAt)
	assert.NotZero(t, rec.TaskPID)
	assert.Equal(t, rec.TaskPID, rec.PGID, "the command leads its own process group")
	assert.Equal(t, []string{"sh", "-c", "echo out; echo err >&2"}, rec.Command)

	log, err := os.ReadFile(lay(d).log(id))
	require.NoError(t, err)
	assert.Contains(t, string(log), "out\n")
	assert.Contains(t, string(log), "err\n")

	// Finished: out of the active set, lock files gone.
	assert.Empty(t, activeNames(t, d))
	assert.False(t, exists(lay(d).ownerLock(id)))
	assert.False(t, exists(lay(d).supervisorLock(id)))
}

func TestStartPropagatesExitCode(t *testing.T) {
	d := newDispatcher(t)
	req, stdout, _ := startRequest("fails", "sh", "-c", "echo partial; exit 3")
	code, id, err := startCode(d, req)
	var exited *vocab.ExitError
	require.ErrorAs(t, err, &exited, "a failing command is not crew's error, only its exit status")
	assert.Equal(t, 3, code)
	assert.Equal(t, "partial\n", stdout.String())

	rec := readDone(t, d, id)
	assert.Equal(t, record.Failed, rec.State)
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 3, *rec.ExitCode)
	assert.Equal(t, "command exited with status 3", rec.Reason)
}

func TestStartCommandKilledBySignal(t *testing.T) {
	d := newDispatcher(t)
	req, _, _ := startRequest("suicide", "sh", "-c", "kill -KILL $$")
	code, id, err := startCode(d, req)
	require.ErrorAs(t, err, new(*vocab.ExitError))
	assert.Equal(t, 128+int(syscall.SIGKILL), code)
	rec := readDone(t, d, id)
	assert.Equal(t, record.Failed, rec.State)
	assert.Equal(t, "SIGKILL", rec.Signal)
	assert.Contains(t, rec.Reason, "killed by SIGKILL")
}

func TestStartEnvironmentAndOwnerLock(t *testing.T) {
	d := newDispatcher(t)
	script := `echo "id=$CREW_RUN_ID"; echo "task=$CREW_TASK"; echo "root=$CREW_ROOT"; echo "keep=$KEEP_ME"`
	if _, err := os.Stat("/proc/self/fd"); err == nil {
		script += `; echo "fd3=$(readlink /proc/self/fd/3)"`
	}
	req, stdout, _ := startRequest("Deploy Prod", "sh", "-c", script)
	req.Env = append(req.Env, "KEEP_ME=yes")
	code, id, err := startCode(d, req)
	require.NoError(t, err)
	require.Equal(t, 0, code)

	out := stdout.String()
	assert.Contains(t, out, "id="+string(id)+"\n")
	assert.Contains(t, out, "task=Deploy Prod\n")
	assert.Contains(t, out, "root="+d.Logs.Root()+"\n")
	assert.Contains(t, out, "keep=yes\n", "the caller's environment is passed on")
	if strings.Contains(out, "fd3=") {
		assert.Contains(t, out, "fd3="+lay(d).ownerLock(id)+"\n", "the owner lock is the command's fd 3")
	}
}

// The command inherits the owner lock: while it runs, the slot is held
// by the command itself.
func TestStartOwnerLockHeldWhileRunning(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	gate := filepath.Join(t.TempDir(), "gate")
	req, _, _ := startRequest("holder", "sh", "-c", `while [ ! -e "$1" ]; do sleep 0.01; done`, "sh", gate)
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })
	done := startAndWaitRunning(t, d, req, "")

	snap, err := d.Status(vocab.StatusQuery{Task: "holder"})
	require.NoError(t, err)
	require.Len(t, snap.Active, 1)
	view := snap.Active[0]
	assert.True(t, view.OwnerAlive)
	assert.True(t, view.SupervisorAlive)
	assert.True(t, view.HoldsSlot)
	assert.NotZero(t, view.TaskPID)

	_, err = d.Admit(context.Background(), admitReq("other"))
	var refused *vocab.RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, vocab.SlotsBusy, refused.Kind)
	_, err = d.Admit(context.Background(), admitReq("holder"))
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, vocab.TaskActive, refused.Kind)

	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	r := awaitStart(t, done, 10*time.Second)
	require.NoError(t, r.err)
	assert.Equal(t, 0, r.code)
	assert.Equal(t, record.Succeeded, readDone(t, d, r.id).State)
	admit(t, d, "other") // the slot is free again
}

func TestStartCommandNotFound(t *testing.T) {
	d := newDispatcher(t)
	req, stdout, _ := startRequest("missing", "crew-test-no-such-command-7f3a")
	code, id, err := startCode(d, req)
	assert.Equal(t, 127, code)
	var launch *vocab.LaunchError
	require.ErrorAs(t, err, &launch)
	assert.True(t, launch.NotFound)
	assert.Equal(t, id, launch.RunID)
	assert.Contains(t, launch.Reason, "command not found: crew-test-no-such-command-7f3a")
	assert.Empty(t, stdout.String())

	rec := readDone(t, d, id)
	assert.Equal(t, record.Failed, rec.State)
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 127, *rec.ExitCode)
	assert.Equal(t, launch.Reason, rec.Reason)
	assert.Nil(t, rec.StartedAt)
	assert.Empty(t, activeNames(t, d))
	assert.False(t, exists(lay(d).ownerLock(id)))
}

func TestStartCommandNotExecutable(t *testing.T) {
	d := newDispatcher(t)
	script := filepath.Join(t.TempDir(), "script.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o600))
	req, _, _ := startRequest("noexec", script)
	code, id, err := startCode(d, req)
	assert.Equal(t, 126, code)
	var launch *vocab.LaunchError
	require.ErrorAs(t, err, &launch)
	assert.False(t, launch.NotFound)
	assert.Contains(t, launch.Reason, "not executable")
	rec := readDone(t, d, id)
	assert.Equal(t, record.Failed, rec.State)
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 126, *rec.ExitCode)
}

// startAndWaitRunning starts req in the background and returns once its
// command is recorded as running.
func startAndWaitRunning(t *testing.T, d *dispatch.Dispatcher, req vocab.StartRequest, ready string) chan startResult {
	t.Helper()
	done := make(chan startResult, 1)
	go func() {
		code, id, err := startCode(d, req)
		done <- startResult{code, id, err}
	}()
	// Whatever happens to the test, no command outlives it.
	t.Cleanup(func() { killActive(d) })
	waitFor(t, "the command to run", 10*time.Second, func() bool {
		snap, err := d.Status(vocab.StatusQuery{Task: req.Task})
		if err != nil || len(snap.Active) != 1 || snap.Active[0].State != record.Running {
			return false
		}
		return ready == "" || exists(ready)
	})
	return done
}

// killActive SIGKILLs the process groups of the root's running commands
// that are provably this test's own: a group whose leader is a child of
// this process that has not been reaped yet (so its pid cannot have been
// reused by anyone else).
func killActive(d *dispatch.Dispatcher) {
	snap, err := d.Status(vocab.StatusQuery{})
	if err != nil {
		return
	}
	for _, v := range snap.Active {
		if v.PGID > 0 && ownChildLeads(v.PGID) {
			_ = syscall.Kill(-v.PGID, syscall.SIGKILL)
		}
	}
}

// ownChildLeads reports whether pid is a living child of this process
// and the leader of its own process group. Without /proc it cannot tell,
// and says no.
func ownChildLeads(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return false
	}
	// After "comm)": state ppid pgrp ...
	f := strings.Fields(s[i+1:])
	return len(f) >= 3 && f[0] != "Z" && f[1] == strconv.Itoa(os.Getpid()) && f[2] == strconv.Itoa(pid)
}

// startCode runs d.Start and turns its outcome into the exit code crew
// start would give (cmd/crew maps the same types the same way).
func startCode(d *dispatch.Dispatcher, req vocab.StartRequest) (int, record.RunID, error) {
	id, err := d.Start(req)
	return codeOf(err), id, err
}

func codeOf(err error) int {
	var (
		exited   *vocab.ExitError
		launch   *vocab.LaunchError
		signal   *vocab.SignalledError
		refused  *vocab.RefusedError
		internal *vocab.InternalError
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exited):
		return exited.Code
	case errors.As(err, &launch) && launch.NotFound:
		return 127
	case errors.As(err, &launch):
		return 126
	case errors.As(err, &signal):
		return 128 + int(signal.Signal)
	case errors.As(err, &refused) && refused.Kind == vocab.TaskActive:
		return 76
	case errors.As(err, &refused):
		return 75
	case errors.As(err, &internal):
		return 125
	}
	return 125
}

type startResult struct {
	code int
	id   record.RunID
	err  error
}

func awaitStart(t *testing.T, done chan startResult, within time.Duration) startResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(within):
		t.Fatalf("Start did not return within %s", within)
		return startResult{}
	}
}

func TestStartForwardsStopSignal(t *testing.T) {
	d := newDispatcher(t)
	sigs := make(chan os.Signal, 1)
	req, _, _ := startRequest("sleeper", "sleep", "30")
	req.Signals = sigs
	req.Grace = 5 * time.Second
	done := startAndWaitRunning(t, d, req, "")

	sent := time.Now()
	sigs <- syscall.SIGTERM
	r := awaitStart(t, done, 10*time.Second)
	assert.Less(t, time.Since(sent), 3*time.Second, "stopped at once, not after the grace period")
	require.ErrorAs(t, r.err, new(*vocab.ExitError))
	assert.Equal(t, 143, r.code)

	rec := readDone(t, d, r.id)
	assert.Equal(t, record.Stopped, rec.State)
	assert.Equal(t, "SIGTERM", rec.Signal)
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 143, *rec.ExitCode)
	assert.Contains(t, rec.Reason, "crew received SIGTERM")
	assert.NotContains(t, rec.Reason, "SIGKILL")
	assert.Empty(t, activeNames(t, d))
}

// A command that ignores the stop signal gets SIGKILL after the grace
// period, and the record says so.
func TestStartEscalatesToSIGKILLAfterGrace(t *testing.T) {
	d := newDispatcher(t)
	ready := filepath.Join(t.TempDir(), "ready")
	sigs := make(chan os.Signal, 1)
	req, _, _ := startRequest("stubborn", "sh", "-c", `trap '' TERM INT; : > "$1"; exec sleep 30`, "sh", ready)
	req.Signals = sigs
	req.Grace = 100 * time.Millisecond
	done := startAndWaitRunning(t, d, req, ready)

	sigs <- syscall.SIGINT
	r := awaitStart(t, done, 10*time.Second)
	require.ErrorAs(t, r.err, new(*vocab.ExitError))
	assert.Equal(t, 128+int(syscall.SIGKILL), r.code)

	rec := readDone(t, d, r.id)
	assert.Equal(t, record.Stopped, rec.State)
	assert.Equal(t, "SIGINT", rec.Signal, "the record names the stop signal crew received")
	assert.Contains(t, rec.Reason, "sent SIGKILL after the 100ms grace period")
}

// A signal while waiting for the admission lock abandons the start;
// nothing is recorded.
func TestStartSignalWhileWaitingForTheLock(t *testing.T) {
	d := newDispatcher(t)
	require.NoError(t, d.Logs.Ensure())
	lock, err := runstore.New(d.Logs.Root()).LockAdmission(context.Background(), time.Second)
	require.NoError(t, err)
	defer lock.Release()

	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGINT
	req, stdout, _ := startRequest("waiter", "echo", "never")
	req.Signals = sigs
	req.LockTimeout = 10 * time.Second
	start := time.Now()
	code, id, err := startCode(d, req)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Equal(t, 130, code)
	assert.Empty(t, id)
	var sig *vocab.SignalledError
	require.ErrorAs(t, err, &sig)
	assert.Equal(t, syscall.SIGINT, sig.Signal)
	assert.Empty(t, sig.RunID)
	assert.Contains(t, err.Error(), "nothing was started")
	assert.Empty(t, stdout.String())
	assert.Empty(t, activeNames(t, d))
	days, err := os.ReadDir(lay(d).doneDir())
	require.NoError(t, err)
	assert.Empty(t, days)
}

// A refusal from Start passes the admission's warnings on and records
// nothing.
func TestStartRefusedPassesWarnings(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	id, _ := writeCorruptActive(t, d, "garbage")
	holdOwner(t, lay(d).ownerLock(id))

	var warnings []string
	req, stdout, _ := startRequest("x", "echo", "never")
	req.Warn = func(err error) { warnings = append(warnings, err.Error()) }
	code, runID, err := startCode(d, req)
	assert.Equal(t, 75, code)
	assert.Empty(t, runID)
	var refused *vocab.RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, vocab.SlotsBusy, refused.Kind)
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "counted as holding a slot")
	assert.Empty(t, stdout.String())
}

func TestStartPassesStdin(t *testing.T) {
	d := newDispatcher(t)
	req, stdout, _ := startRequest("cat", "cat")
	req.Stdin = strings.NewReader("from stdin\n")
	code, _, err := startCode(d, req)
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "from stdin\n", stdout.String())
}

func TestStartRunsInDir(t *testing.T) {
	d := newDispatcher(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	req, stdout, _ := startRequest("pwd", "pwd", "-P")
	req.Dir = dir
	code, id, err := startCode(d, req)
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, dir+"\n", stdout.String())
	assert.Equal(t, dir, readDone(t, d, id).Dir)
}
