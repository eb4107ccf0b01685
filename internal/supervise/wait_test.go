package supervise

// The supervisor's wait loop against real processes and a real state
// root: crew stop's requests, forwarded signals, and the grace period.
// Every command is the test's own child (the supervisor runs in the test
// process) and ends within the test; none outlives 30 s in any case.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// reserve makes an admitted run of command in a fresh state root.
func reserve(t *testing.T, command ...string) Request {
	t.Helper()
	st := runstore.New(filepath.Join(t.TempDir(), "state"))
	require.NoError(t, st.Ensure())
	now := time.Now().UTC()
	rec := &record.Run{Version: record.RecordVersion, RunID: record.NewRunID(now), Task: "t", State: record.Provisioning,
		Command: command, Host: "test", CreatedAt: now, SupervisorPID: os.Getpid()}
	adm, err := st.LockAdmission(context.Background(), 10*time.Second)
	require.NoError(t, err)
	locks, err := adm.Reserve(rec)
	adm.Release()
	require.NoError(t, err)
	return Request{Run: locks, Logs: st, Rec: rec, Grace: 10 * time.Second, Signals: make(chan os.Signal, 1)}
}

// supervise runs req in the background and returns its result channel.
func supervise(req Request) <-chan error {
	done := make(chan error, 1)
	go func() { done <- Run(req) }()
	return done
}

func awaitRunning(t *testing.T, req Request) *record.Run {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if rec, err := req.Logs.ReadRun(req.Rec.RunID); err == nil && rec.State == record.Running {
			return rec
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the run never started")
	return nil
}

func awaitResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor did not finish")
		return nil
	}
}

func awaitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s never appeared", path)
}

func stopRequest(grace string) *record.StopRequest {
	return &record.StopRequest{PID: 4242, User: "tester", Signal: "SIGTERM", Signo: int(syscall.SIGTERM), At: time.Now(), Grace: grace}
}

func exitCodeOf(t *testing.T, err error) int {
	t.Helper()
	var ee *vocab.ExitError
	require.True(t, errors.As(err, &ee), "want an ExitError, got %v", err)
	return ee.Code
}

// TestStopRequestIsCarriedOutBySupervisor: the supervisor notices crew
// stop's request, signals its own command's group, acknowledges, and
// records who asked.
func TestStopRequestIsCarriedOutBySupervisor(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	req := reserve(t, "sh", "-c", `trap "" TERM; while [ ! -e "$1" ]; do sleep 0.01; done`, "x", gate)
	done := supervise(req)
	rec := awaitRunning(t, req)
	require.NoError(t, req.Logs.WriteStopRequest(rec.RunID, stopRequest("5s")))

	// sh ignores SIGTERM, and waits for the gate: the run outlives the
	// acknowledgement.
	var ack *record.StopAck
	for deadline := time.Now().Add(5 * time.Second); ack == nil && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if r := req.Logs.ReadStopRequest(rec.RunID); r != nil {
			ack = r.Ack
		}
	}
	require.NotNil(t, ack, "the supervisor acknowledges the request")
	assert.Equal(t, os.Getpid(), ack.SupervisorPID)
	assert.Equal(t, rec.PGID, ack.PGID)

	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	err := awaitResult(t, done)
	require.NoError(t, err, "sh ignored SIGTERM and exited 0 once let go")
	final, rerr := req.Logs.ReadRun(rec.RunID)
	require.NoError(t, rerr)
	assert.Equal(t, record.Stopped, final.State)
	assert.Contains(t, final.Reason, "stopped by crew stop (pid 4242, user tester), which sent SIGTERM to process group")
	assert.NotContains(t, final.Reason, "SIGKILL")
}

// TestRequestedStopGivesTheGroupItsGrace: when the command's leader exits
// on the signal but a process of its group ignores it, that process keeps
// the grace period, then gets SIGKILL, and the record says so.
func TestRequestedStopGivesTheGroupItsGrace(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "trapped")
	req := reserve(t, "sh", "-c", `(trap "" TERM; touch "$1"; exec sleep 20) & wait`, "x", ready)
	done := supervise(req)
	rec := awaitRunning(t, req)
	awaitFile(t, ready) // the subshell ignores SIGTERM now
	start := time.Now()
	require.NoError(t, req.Logs.WriteStopRequest(rec.RunID, stopRequest("500ms")))
	assert.Equal(t, 143, exitCodeOf(t, awaitResult(t, done)))
	assert.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond, "the grace period was kept")
	final, err := req.Logs.ReadRun(rec.RunID)
	require.NoError(t, err)
	assert.Contains(t, final.Reason, "and SIGKILL after the 500ms grace period")
}

// TestRequestedStopEndsWhenTheGroupIsGone: no grace period is sat out
// when nothing of the group is left.
func TestRequestedStopEndsWhenTheGroupIsGone(t *testing.T) {
	req := reserve(t, "sh", "-c", `sleep 20 & wait`)
	done := supervise(req)
	rec := awaitRunning(t, req)
	start := time.Now()
	require.NoError(t, req.Logs.WriteStopRequest(rec.RunID, stopRequest("15s")))
	assert.Equal(t, 143, exitCodeOf(t, awaitResult(t, done)))
	assert.Less(t, time.Since(start), 5*time.Second)
	final, err := req.Logs.ReadRun(rec.RunID)
	require.NoError(t, err)
	assert.NotContains(t, final.Reason, "SIGKILL")
}

// TestForwardedSignalEndsTheRestAtOnce: a signal crew itself received
// (Ctrl-C, a SIGTERM to crew start) ends what is left of the group as
// soon as the leader has exited.
func TestForwardedSignalEndsTheRestAtOnce(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "trapped")
	req := reserve(t, "sh", "-c", `(trap "" TERM; touch "$1"; exec sleep 20) & wait`, "x", ready)
	signals := make(chan os.Signal, 1)
	req.Signals = signals
	done := supervise(req)
	rec := awaitRunning(t, req)
	awaitFile(t, ready)
	start := time.Now()
	signals <- syscall.SIGTERM
	assert.Equal(t, 143, exitCodeOf(t, awaitResult(t, done)))
	assert.Less(t, time.Since(start), 5*time.Second, "not the 10s grace period")
	final, err := req.Logs.ReadRun(rec.RunID)
	require.NoError(t, err)
	assert.Contains(t, final.Reason, "crew received SIGTERM and forwarded it to process group")
}

// TestStopRequestBeforeLaunch: a run crew stop asked to stop before its
// command started is recorded stopped, and the command never runs.
func TestStopRequestBeforeLaunch(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	req := reserve(t, "touch", marker)
	require.NoError(t, req.Logs.WriteStopRequest(req.Rec.RunID, stopRequest("1s")))
	err := awaitResult(t, supervise(req))
	var sig *vocab.SignalledError
	require.ErrorAs(t, err, &sig)
	assert.Equal(t, syscall.SIGTERM, sig.Signal)
	assert.Contains(t, err.Error(), "stopped by crew stop (pid 4242, user tester) before the command started")
	assert.NoFileExists(t, marker)
	final, rerr := req.Logs.ReadRun(req.Rec.RunID)
	require.NoError(t, rerr)
	assert.Equal(t, record.Stopped, final.State)
}

// TestRequestedSignal: the signal is taken from the request, and anything
// that is not a signal means SIGTERM.
func TestRequestedSignal(t *testing.T) {
	for _, c := range []struct {
		req  record.StopRequest
		want syscall.Signal
	}{
		{record.StopRequest{Signal: "SIGINT", Signo: 2}, syscall.SIGINT},
		{record.StopRequest{Signal: "SIGHUP"}, syscall.SIGHUP},
		{record.StopRequest{Signal: "bogus", Signo: 0}, syscall.SIGTERM},
		{record.StopRequest{Signal: "", Signo: 99}, syscall.SIGTERM},
		{record.StopRequest{Signal: "", Signo: -9}, syscall.SIGTERM},
	} {
		assert.Equal(t, c.want, RequestedSignal(&c.req), "%+v", c.req)
	}
}
