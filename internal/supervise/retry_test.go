package supervise

// --timeout and --retries against real processes and a real state root.
// Durations are deadlock guards or the mechanism under test, never
// assertions about speed.

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

func awaitRecord(t *testing.T, req Request, what string, cond func(*record.Run) bool) *record.Run {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if rec, err := req.Logs.ReadRun(req.Rec.RunID); err == nil && cond(rec) {
			return rec
		}
	}
	t.Fatalf("the record never showed %s", what)
	return nil
}

// TestTimeoutStopsTheCommand: once --timeout is over, the command's group
// gets SIGTERM; the run is recorded failed, timed out, exit 124.
func TestTimeoutStopsTheCommand(t *testing.T) {
	req := reserve(t, "sleep", "20")
	req.Rec.Timeout = record.Duration(200 * time.Millisecond)
	assert.Equal(t, vocab.ExitTimedOut, exitCodeOf(t, awaitResult(t, supervise(req))))
	final, err := req.Logs.ReadRun(req.Rec.RunID)
	require.NoError(t, err)
	assert.Equal(t, record.Failed, final.State)
	assert.True(t, final.TimedOut)
	assert.Equal(t, "SIGTERM", final.Signal)
	require.NotNil(t, final.ExitCode)
	assert.Equal(t, 124, *final.ExitCode)
	assert.Contains(t, final.Reason, "timed out after 200ms: crew sent SIGTERM to process group")
	assert.Contains(t, final.Reason, "command was killed by SIGTERM")
	assert.Nil(t, final.Attempts, "no attempts are listed without --retries")
}

// TestSignalTakesOverATimeout: a signal crew receives while the timeout's
// stop is under way makes the run stopped (not timed out), and a stopped
// run is not retried. (Should an attempt die of the timeout's SIGTERM
// before its trap is set, it is retried, as it should be: the test counts
// attempts rather than assume there is one.)
func TestSignalTakesOverATimeout(t *testing.T) {
	dir := t.TempDir()
	obs, termed := filepath.Join(dir, "starts"), filepath.Join(dir, "termed")
	req := reserve(t, "sh", "-c", `trap 'touch "$2"' TERM; echo >> "$1"; while :; do sleep 0.05; done`, "x", obs, termed)
	req.Rec.Timeout, req.Rec.Retries, req.Grace = record.Duration(100*time.Millisecond), 3, 20*time.Second
	signals := make(chan os.Signal, 1)
	req.Signals = signals
	done := supervise(req)
	awaitFile(t, termed) // the timeout's SIGTERM reached a trapped attempt, which goes on
	signals <- syscall.SIGINT
	assert.Equal(t, 130, exitCodeOf(t, awaitResult(t, done)))
	final, err := req.Logs.ReadRun(req.Rec.RunID)
	require.NoError(t, err)
	assert.Equal(t, record.Stopped, final.State)
	assert.False(t, final.TimedOut)
	assert.Equal(t, "SIGINT", final.Signal)
	assert.Contains(t, final.Reason, "crew received SIGINT")
	require.NotEmpty(t, final.Attempts)
	assert.Equal(t, len(final.Attempts), lines(t, obs), "no attempt after the stopped one")
	last := final.Attempts[len(final.Attempts)-1]
	assert.Equal(t, "SIGINT", last.Signal)
	assert.False(t, last.TimedOut)
}

// TestRetriesUntilSuccess: a failing command runs again, in the same run,
// until it succeeds; each attempt is in the record, and crew says so,
// naming the attempt.
func TestRetriesUntilSuccess(t *testing.T) {
	obs := filepath.Join(t.TempDir(), "starts")
	req := reserve(t, "sh", "-c", `echo >> "$1"; [ "$(wc -l < "$1")" -ge 3 ]`, "x", obs)
	req.Rec.Retries = 4
	var mu sync.Mutex
	var notes []string
	req.Note = func(n string) { mu.Lock(); notes = append(notes, n); mu.Unlock() }
	require.NoError(t, awaitResult(t, supervise(req)))
	assert.Equal(t, 3, lines(t, obs))
	final, err := req.Logs.ReadRun(req.Rec.RunID)
	require.NoError(t, err)
	assert.Equal(t, record.Succeeded, final.State)
	require.Len(t, final.Attempts, 3)
	for i, a := range final.Attempts {
		assert.Equal(t, i+1, a.Number)
		require.NotNil(t, a.ExitCode)
		require.NotNil(t, a.EndedAt)
		assert.Equal(t, map[bool]int{true: 0, false: 1}[i == 2], *a.ExitCode, "attempt %d", i+1)
	}
	assert.Equal(t, final.Attempts[2].PID, final.TaskPID)
	assert.Equal(t, []string{"attempt 2 of 5 after exit 1", "attempt 3 of 5 after exit 1"}, notes)
}

// TestRetriesEndWithTheLastAttempt: when every attempt fails, the run's
// exit code is the last attempt's, and a timeout counts per attempt.
func TestRetriesEndWithTheLastAttempt(t *testing.T) {
	obs := filepath.Join(t.TempDir(), "starts")
	req := reserve(t, "sh", "-c", `echo >> "$1"; if [ "$(wc -l < "$1")" -ge 2 ]; then exec sleep 20; fi; exit 3`, "x", obs)
	// The first attempt exits at once; 5s is only its margin.
	req.Rec.Retries, req.Rec.Timeout = 1, record.Duration(5*time.Second)
	assert.Equal(t, 124, exitCodeOf(t, awaitResult(t, supervise(req))))
	assert.Equal(t, 2, lines(t, obs))
	final, err := req.Logs.ReadRun(req.Rec.RunID)
	require.NoError(t, err)
	require.Len(t, final.Attempts, 2)
	assert.Equal(t, 3, *final.Attempts[0].ExitCode)
	assert.False(t, final.Attempts[0].TimedOut)
	assert.True(t, final.Attempts[1].TimedOut)
	assert.True(t, final.TimedOut)
}

// TestStopRequestDuringRetryDelay: crew stop between attempts is
// acknowledged, ends the run as stopped, and no further attempt starts.
func TestStopRequestDuringRetryDelay(t *testing.T) {
	obs := filepath.Join(t.TempDir(), "starts")
	req := reserve(t, "sh", "-c", `echo >> "$1"; exit 1`, "x", obs)
	req.Rec.Retries, req.Rec.RetryDelay = 1, record.Duration(time.Minute) // the delay is only a deadlock guard
	done := supervise(req)
	between := awaitRecord(t, req, "the first attempt's end", func(r *record.Run) bool {
		return len(r.Attempts) == 1 && r.Attempts[0].EndedAt != nil
	})
	assert.Equal(t, record.Running, between.State, "the run keeps its slot between attempts")
	assert.Zero(t, between.TaskPID, "no command runs between attempts")
	require.NoError(t, req.Logs.WriteStopRequest(req.Rec.RunID, stopRequest("1s")))
	assert.Equal(t, 143, exitCodeOf(t, awaitResult(t, done)))
	final, err := req.Logs.ReadRun(req.Rec.RunID)
	require.NoError(t, err)
	assert.Equal(t, record.Stopped, final.State)
	assert.Equal(t, "SIGTERM", final.Signal)
	assert.Contains(t, final.Reason, "stopped by crew stop (pid 4242, user tester) while waiting to retry (attempt 1 of 2: command exited with status 1); no command was running")
	assert.Equal(t, 1, lines(t, obs))
	r := req.Logs.ReadStopRequest(req.Rec.RunID)
	if r != nil { // removed once the run is final; if still there, acknowledged
		assert.NotNil(t, r.Ack)
	}
}

// TestRetriesAfter: only failures are retried, and only while attempts
// remain.
func TestRetriesAfter(t *testing.T) {
	s := &supervisor{rec: &record.Run{Retries: 2}}
	for _, c := range []struct {
		state record.State
		n     int
		want  bool
	}{
		{record.Failed, 1, true},
		{record.Failed, 2, true},
		{record.Failed, 3, false},
		{record.Stopped, 1, false},
		{record.Succeeded, 1, false},
	} {
		assert.Equal(t, c.want, s.retriesAfter(ending{state: c.state}, c.n), "%s after attempt %d", c.state, c.n)
	}
	assert.Equal(t, "exit 3", ending{code: 3}.short(0))
	assert.Equal(t, "SIGSEGV", ending{code: 139, signal: "SIGSEGV"}.short(0))
	assert.Equal(t, "timing out (1m30s)", ending{code: 124, signal: "SIGTERM", timedOut: true}.short(90*time.Second))
}
