package e2e

// crew start --timeout and --retries, black-box: the command itself
// counts its attempts (it appends a line to a file each time it starts),
// and the process table says whether its group is gone. Durations are
// the mechanism under test or deadlock guards, never assertions of speed.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// attemptsJSON is what the tests read of a run with a timeout or retries.
type attemptsJSON struct {
	runJSON
	Timeout    string `json:"timeout"`
	Retries    int    `json:"retries"`
	RetryDelay string `json:"retryDelay"`
	TimedOut   bool   `json:"timedOut"`
	Attempts   []struct {
		Number     int        `json:"attempt"`
		StartedAt  time.Time  `json:"startedAt"`
		PID        int        `json:"pid"`
		FinishedAt *time.Time `json:"finishedAt"`
		ExitCode   *int       `json:"exitCode"`
		Signal     string     `json:"signal"`
		TimedOut   bool       `json:"timedOut"`
		Reason     string     `json:"reason"`
	} `json:"attempts"`
	Events []struct {
		What string `json:"what"`
	} `json:"events"`
}

func (e *env) attempts(id string) attemptsJSON {
	e.t.Helper()
	r := e.run("status", "--json", id)
	require.Equal(e.t, 0, r.Code, r.Stderr)
	var v attemptsJSON
	require.NoError(e.t, json.Unmarshal([]byte(r.Stdout), &v), r.Stdout)
	return v
}

// lastRun is the id of the task's latest finished run, from crew history.
func (e *env) lastRun(task string) attemptsJSON {
	e.t.Helper()
	r := e.run("history", "--json", task)
	require.Equal(e.t, 0, r.Code, r.Stderr)
	var h struct {
		Runs []attemptsJSON `json:"runs"`
	}
	require.NoError(e.t, json.Unmarshal([]byte(r.Stdout), &h), r.Stdout)
	require.NotEmpty(e.t, h.Runs, "task %s has a finished run", task)
	return h.Runs[0]
}

// starts counts the lines the command appended to path: its attempts.
func starts(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

// TestTimeout: once --timeout is over, the command's whole group is
// stopped; the run is recorded failed and timed out, shown as "timed out"
// by status and history, and crew start exits 124, as timeout(1) does.
func TestTimeout(t *testing.T) {
	e := newEnv(t)
	r := e.run("start", "--timeout", "500ms", "slow", "--", "sh", "-c", "sleep 30 & wait")
	assert.Equal(t, 124, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: slow: timed out after 500ms: stopping the command (SIGTERM, then SIGKILL after 10s)")
	run := e.lastRun("slow")
	assert.Equal(t, "failed", run.State)
	assert.True(t, run.TimedOut)
	assert.Equal(t, "500ms", run.Timeout)
	assert.Equal(t, "SIGTERM", run.Signal)
	require.NotNil(t, run.ExitCode)
	assert.Equal(t, 124, *run.ExitCode)
	assert.Contains(t, run.Reason, "timed out after 500ms: crew sent SIGTERM to process group")
	assert.Empty(t, run.Attempts, "no attempts are listed without --retries")
	eventually(t, 10*time.Second, "the command's group (the sleep too) to be gone", func() bool { return !groupAlive(run.PGID) })
	assert.GreaterOrEqual(t, run.FinishedAt.Sub(*run.StartedAt), 500*time.Millisecond, "it was not stopped before its time")

	h := e.run("history", "slow")
	assert.Regexp(t, `timed out\s+124`, h.Stdout)
	s := e.run("status", run.RunID)
	assert.Regexp(t, `State:\s+timed out`, s.Stdout)
	assert.Regexp(t, `Timeout:\s+500ms per attempt`, s.Stdout)
	w := e.run("wait", run.RunID)
	assert.Equal(t, 124, w.Code, "crew wait exits as crew start did")

	// --quiet keeps crew's line about the timeout to itself, not the code.
	r = e.run("start", "--quiet", "--timeout", "300ms", "hush", "--", "sleep", "30")
	assert.Equal(t, 124, r.Code, r.Stderr)
	assert.Empty(t, r.Stderr)

	// A command that ends in time is not touched.
	r = e.run("start", "--timeout", "1h", "quick", "--", "true")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.False(t, e.lastRun("quick").TimedOut)
}

// TestTimeoutThenSIGKILL: a command that ignores SIGTERM gets SIGKILL
// after --grace, and the record says so.
func TestTimeoutThenSIGKILL(t *testing.T) {
	e := newEnv(t)
	// 2s gives sh the time to ignore SIGTERM before the timeout comes.
	r := e.run("start", "--timeout", "2s", "--grace", "300ms", "stubborn", "--", "sh", "-c", `trap "" TERM; sleep 30 & wait; wait`)
	assert.Equal(t, 124, r.Code, r.Stderr)
	run := e.lastRun("stubborn")
	assert.True(t, run.TimedOut)
	assert.Contains(t, run.Reason, "and SIGKILL after the 300ms grace period; command was killed by SIGKILL")
	eventually(t, 10*time.Second, "the command's group to be gone", func() bool { return !groupAlive(run.PGID) })
}

// TestTimeoutDetached: the detached supervisor enforces the timeout.
func TestTimeoutDetached(t *testing.T) {
	e := newEnv(t)
	r := e.run("start", "--detach", "--timeout", "300ms", "bg", "--", "sleep", "30")
	require.Equal(t, 0, r.Code, r.Stderr)
	id := strings.TrimSpace(r.Stdout)
	w := e.run("wait", "--timeout", "60s", id)
	assert.Equal(t, 124, w.Code, w.Stderr)
	run := e.attempts(id)
	assert.Equal(t, "failed", run.State)
	assert.True(t, run.TimedOut)
	assert.Contains(t, run.Reason, "timed out after 300ms")
	eventually(t, 10*time.Second, "the command's group to be gone", func() bool { return !groupAlive(run.PGID) })
}

// TestRetriesUntilSuccess: a failing command runs again in the same run
// until it succeeds; crew says so, naming the task, and the record lists
// every attempt.
func TestRetriesUntilSuccess(t *testing.T) {
	e := newEnv(t)
	obs := filepath.Join(e.dir, "starts")
	r := e.run("start", "--retries", "5", "--retry-delay", "0", "flaky", "--", "sh", "-c",
		`echo >> "$1"; n=$(($(wc -l < "$1"))); printf 'try %d' "$n"; [ "$n" -ge 3 ]`, "x", obs)
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, 3, starts(t, obs))
	// The log shows where each attempt begins, on a line of its own even
	// when the previous attempt's output ended mid-line.
	logs := e.run("logs", "flaky")
	assert.Equal(t, "try 1\n[crew: attempt 2 of 6 after exit 1]\ntry 2\n[crew: attempt 3 of 6 after exit 1]\ntry 3", logs.Stdout)
	assert.Contains(t, r.Stderr, "crew: flaky: attempt 2 of 6 after exit 1\n")
	assert.Contains(t, r.Stderr, "crew: flaky: attempt 3 of 6 after exit 1\n")
	run := e.lastRun("flaky")
	assert.Equal(t, "succeeded", run.State)
	assert.Equal(t, 5, run.Retries)
	require.Len(t, run.Attempts, 3)
	for i, a := range run.Attempts {
		assert.Equal(t, i+1, a.Number)
		require.NotNil(t, a.ExitCode)
		require.NotNil(t, a.FinishedAt)
	}
	assert.Equal(t, []int{1, 1, 0}, []int{*run.Attempts[0].ExitCode, *run.Attempts[1].ExitCode, *run.Attempts[2].ExitCode})
	assert.Len(t, e.status().Finished, 1, "the attempts are one run")
	h := e.runEnv([]string{"COLUMNS=200"}, "history")
	assert.Regexp(t, `flaky\s+succeeded\s+0 .*  attempt 3 of 6\n`, h.Stdout)
}

// TestRetriesEndWithTheLastAttempt: when every attempt fails, crew exits
// with the last one's code; the timeout counts per attempt, and a timed
// out attempt is retried.
func TestRetriesEndWithTheLastAttempt(t *testing.T) {
	e := newEnv(t)
	obs := filepath.Join(e.dir, "starts")
	// The first and last attempts exit at once; 10s is only their margin.
	r := e.run("start", "--retries", "2", "--retry-delay", "10ms", "--timeout", "10s", "doomed", "--", "sh", "-c",
		`echo >> "$1"; n=$(wc -l < "$1"); [ "$n" -eq 2 ] && exec sleep 30; exit $((n + 10))`, "x", obs)
	assert.Equal(t, 13, r.Code, r.Stderr)
	assert.Equal(t, 3, starts(t, obs))
	assert.Contains(t, r.Stderr, "crew: doomed: attempt 2 of 3 after exit 11, in 10ms\n")
	assert.Contains(t, r.Stderr, "crew: doomed: attempt 3 of 3 after timing out (10s), in 10ms\n")
	run := e.lastRun("doomed")
	assert.Equal(t, "failed", run.State)
	assert.False(t, run.TimedOut, "the last attempt did not time out")
	require.Len(t, run.Attempts, 3)
	assert.True(t, run.Attempts[1].TimedOut)
	assert.Equal(t, 124, *run.Attempts[1].ExitCode)
	assert.Equal(t, 13, *run.ExitCode)
	assert.Contains(t, e.runEnv([]string{"COLUMNS=200"}, "history", "doomed").Stdout, "attempt 3 of 3: command exited with status 13")
}

// TestRetriesKeepTheSlot: between attempts the run keeps its slot (a
// start at cap 1 is refused), and crew stop during the delay ends the run
// as stopped, with no further attempt.
func TestRetriesKeepTheSlot(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	obs := filepath.Join(e.dir, "starts")
	// The minute's delay is only a deadlock guard: crew stop ends it.
	p := e.start(nil, "start", "--retries", "3", "--retry-delay", "1m", "retrier", "--", "sh", "-c", `echo >> "$1"; exit 1`, "x", obs)
	var id string
	eventually(t, 10*time.Second, "the first attempt to end", func() bool {
		for _, r := range e.status().Active {
			if r.Task == "retrier" {
				id = r.RunID
				run := e.attempts(id)
				return len(run.Attempts) == 1 && run.Attempts[0].FinishedAt != nil
			}
		}
		return false
	})
	run := e.attempts(id)
	assert.Equal(t, "running", run.State)
	assert.Zero(t, run.TaskPID, "no command runs between attempts")
	assert.Equal(t, 1, e.status().SlotsInUse)
	text := e.runEnv([]string{"COLUMNS=200"}, "status")
	assert.Regexp(t, `retrier\s+retrying\s`, text.Stdout)
	assert.Contains(t, text.Stdout, ": attempt 1 of 4 ended (command exited with status 1); attempt 2 at ")
	other := e.run("start", "other", "--", "true")
	assert.Equal(t, 75, other.Code, "the slot is still held: %s", other.Stderr)

	s := e.run("stop", "--grace", "1s", id)
	assert.Equal(t, 0, s.Code, s.Stderr)
	res := p.wait(t, 30*time.Second)
	assert.Equal(t, 143, res.Code, res.Stderr)
	assert.Contains(t, res.Stderr, "crew: retrier: attempt 2 of 4 after exit 1, in 1m\n")
	assert.Equal(t, 1, starts(t, obs), "no attempt after the stop")
	run = e.attempts(id)
	assert.Equal(t, "stopped", run.State)
	assert.Contains(t, run.Reason, "stopped by crew stop (pid ")
	assert.Contains(t, run.Reason, "while waiting to retry (attempt 1 of 4: command exited with status 1); no command was running")
	assert.Equal(t, 0, e.status().SlotsInUse)
}

// TestStoppedRunIsNotRetried: a signal crew forwards stops the run; it is
// recorded stopped and not run again.
func TestStoppedRunIsNotRetried(t *testing.T) {
	e := newEnv(t)
	obs := filepath.Join(e.dir, "starts")
	p := e.start(nil, "start", "--retries", "3", "--retry-delay", "0", "victim", "--", "sh", "-c", `echo >> "$1"; exec sleep 30`, "x", obs)
	run := e.activeRun("victim")
	e.killRunAtCleanup(run)
	eventually(t, 10*time.Second, "the command to start", func() bool { return starts(t, obs) == 1 })
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM)) // our own child: crew start
	res := p.wait(t, 30*time.Second)
	assert.Equal(t, 143, res.Code, res.Stderr)
	assert.NotContains(t, res.Stderr, "attempt 2")
	assert.Equal(t, 1, starts(t, obs))
	got := e.attempts(run.RunID)
	assert.Equal(t, "stopped", got.State)
	assert.Len(t, got.Attempts, 1)
}

// TestRetriesDetached: the detached supervisor retries too, and crew wait
// exits with the last attempt's code.
func TestRetriesDetached(t *testing.T) {
	e := newEnv(t)
	obs := filepath.Join(e.dir, "starts")
	r := e.run("start", "--detach", "--retries", "2", "--retry-delay", "0", "bgflaky", "--", "sh", "-c", `echo >> "$1"; exit 5`, "x", obs)
	require.Equal(t, 0, r.Code, r.Stderr)
	id := strings.TrimSpace(r.Stdout)
	w := e.run("wait", "--timeout", "60s", id)
	assert.Equal(t, 5, w.Code, w.Stderr)
	assert.Equal(t, 3, starts(t, obs))
	run := e.attempts(id)
	assert.Len(t, run.Attempts, 3)
	s := e.run("status", id)
	assert.Regexp(t, `Attempt:\s+3 of 3`, s.Stdout)
	assert.Contains(t, s.Stdout, "attempt 2 of 3: command exited with status 5; next attempt in 0s")
}

// TestTimeoutAndRetriesUsageErrors: values crew cannot use are usage
// errors (64) that say what to give, and touch nothing.
func TestTimeoutAndRetriesUsageErrors(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--timeout=-5m"}, "crew: --timeout must not be negative, not -5m: give how long the command may run, as in --timeout=10m (0: no timeout)"},
		{[]string{"--timeout", "soon"}, `crew: --timeout "soon": not a duration; give a number and a unit, as in --timeout=90s (durations: 90s, 10m, 1h30m, 7d)`},
		{[]string{"--timeout", "5"}, `crew: --timeout "5": not a duration; give a number and a unit, as in --timeout=5s`},
		{[]string{"--retries", "-1"}, "crew: --retries must be from 0 to 100, not -1"},
		{[]string{"--retries", "101"}, "crew: --retries must be from 0 to 100, not 101"},
		{[]string{"--retries", "many"}, `crew: --retries "many": not a whole number`},
		{[]string{"--retries", "1", "--retry-delay=-1s"}, "crew: --retry-delay must not be negative, not -1s"},
		{[]string{"--retries", "1", "--retry-delay", "x"}, `crew: --retry-delay "x": not a duration`},
		{[]string{"--retry-delay", "5s"}, "crew: --retry-delay goes with --retries N: without retries there is nothing to wait for"},
	} {
		args := append(append([]string{"start"}, c.args...), "build", "--", "true")
		r := e.run(args...)
		assert.Equal(t, 64, r.Code, "%v: %s", c.args, r.Stderr)
		assert.Contains(t, r.Stderr, c.want, "%v", c.args)
		assert.Empty(t, r.Stdout)
	}
	assert.NoDirExists(t, e.root, "no usage error touched the state root")

	h := e.run("start", "--help")
	assert.Equal(t, 0, h.Code)
	for _, want := range []string{"--timeout", "--retries", "--retry-delay", "124 --timeout ran out"} {
		assert.Contains(t, h.Stdout, want)
	}
}

// TestSupervisorDiesBetweenAttempts: a crew start killed during the retry
// delay leaves no command holding the slot, so the next start is admitted
// at cap 1 without an operator, and the run is finalized as interrupted,
// saying it was between attempts.
func TestSupervisorDiesBetweenAttempts(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	obs := filepath.Join(e.dir, "starts")
	p := e.start(nil, "start", "--retries", "1", "--retry-delay", "1m", "fragile", "--", "sh", "-c", `echo >> "$1"; exit 2`, "x", obs)
	var id string
	eventually(t, 10*time.Second, "the first attempt to end", func() bool {
		for _, r := range e.status().Active {
			if r.Task == "fragile" {
				id = r.RunID
				run := e.attempts(id)
				return len(run.Attempts) == 1 && run.Attempts[0].FinishedAt != nil
			}
		}
		return false
	})
	require.NoError(t, p.cmd.Process.Kill()) // our own child: crew start, the run's supervisor
	p.wait(t, 10*time.Second)
	r := e.run("start", "next", "--", "true")
	assert.Equal(t, 0, r.Code, "the dead run's slot was not kept: %s", r.Stderr)
	run := e.attempts(id)
	assert.Equal(t, "interrupted", run.State)
	assert.Contains(t, run.Reason, "no command was running: attempt 1 of 2 had ended (command exited with status 2) and the next had not started")
	assert.Equal(t, 1, starts(t, obs))
}
