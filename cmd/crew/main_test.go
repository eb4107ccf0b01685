package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

type result struct {
	code           int
	stdout, stderr string
}

// crew runs the CLI in-process with buffers for its streams.
func crew(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, streams{In: strings.NewReader(""), Out: &stdout, Err: &stderr})
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// newRoot returns a state root that does not exist yet.
func newRoot(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "state")
}

// holdSlot reserves a slot for task as a living run would (this process
// holds its locks) until the test ends.
func holdSlot(t *testing.T, root, task string) record.RunID {
	t.Helper()
	res, err := dispatch.New(root).Admit(context.Background(), vocab.AdmitRequest{Task: task, Command: []string{"true"}, LockTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(res.Run.Release)
	return res.Rec.RunID
}

func TestUsageErrors(t *testing.T) {
	root := newRoot(t)
	cases := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"missing task", []string{"start"}, "crew: missing task name"},
		{"missing command", []string{"start", "build"}, "crew: missing command: give it after --, as in crew start build -- COMMAND"},
		{"empty command after dash", []string{"start", "build", "--"}, "crew: missing command"},
		{"no task before dash", []string{"start", "--", "true"}, "crew: expected one task name before --, got 0"},
		{"two tasks", []string{"start", "a", "b", "--", "true"}, `crew: expected one task name before --, got 2: ["a" "b"]`},
		{"empty task", []string{"start", "", "--", "true"}, "crew: invalid task name: task name is empty"},
		{"control character", []string{"start", "bad\tname", "--", "true"}, "crew: invalid task name:"},
		{"too long", []string{"start", strings.Repeat("x", 201), "--", "true"}, "the limit is 200"},
		{"invalid utf-8", []string{"start", "bad\xffname", "--", "true"}, "is not valid UTF-8"},
		{"unknown flag", []string{"start", "--bogus", "x", "--", "true"}, "crew: unknown flag: --bogus"},
		{"bad duration", []string{"start", "--grace", "soon", "x", "--", "true"}, `crew: --grace "soon": not a duration; give a number and a unit, as in --grace=90s (durations: 90s, 10m, 1h30m, 7d)`},
		{"duration without unit", []string{"start", "--grace", "5", "x", "--", "true"}, `crew: --grace "5": not a duration; give a number and a unit, as in --grace=5s`},
		{"lock timeout without unit", []string{"start", "--lock-timeout=30", "x", "--", "true"}, `crew: --lock-timeout "30": not a duration; give a number and a unit, as in --lock-timeout=30s`},
		{"wait limit as a word", []string{"start", "--wait", "10m", "build", "--", "make"}, `crew: --wait takes its limit only after "=": write --wait=10m (a separate word after --wait is read as the task name)`},
		{"wait limit as the only word", []string{"start", "--wait", "90", "--", "make"}, `crew: --wait takes its limit only after "=": write --wait=90`},
		{"wait limit in words", []string{"start", "--wait", "5min", "x", "--", "make"}, `write --wait=5min`},
		{"wait limit not a duration", []string{"start", "--wait=abc", "x", "--", "true"}, `crew: --wait "abc": not a duration; give a number and a unit, as in --wait=90s`},
		{"json without detach", []string{"start", "--json", "x", "--", "true"}, "crew: --json goes with --detach (it prints the detached run's id as JSON)"},
		{"refused exit too big", []string{"start", "--refused-exit", "256", "x", "--", "true"}, `crew: --refused-exit "256": give N for every refusal, or 76=N (running=N: the task already runs) or 75=N (busy=N: the slots are busy) for one, N an exit code from 0 to 255`},
		{"refused exit negative", []string{"start", "--refused-exit=-1", "x", "--", "true"}, `crew: --refused-exit "-1": give N for every refusal`},
		{"refused exit not a number", []string{"start", "--refused-exit", "never", "x", "--", "true"}, `crew: --refused-exit "never": give N for every refusal`},
		{"refused exit unknown reason", []string{"start", "--refused-exit", "77=0", "x", "--", "true"}, `crew: --refused-exit "77=0": "77" is not a reason crew refuses a start for; give N for every refusal`},
		{"refused exit reason without code", []string{"start", "--refused-exit", "76=", "x", "--", "true"}, `crew: --refused-exit "76=": give N for every refusal`},
		{"quiet unknown reason", []string{"start", "--quiet=77", "x", "--", "true"}, `crew: --quiet "77": give --quiet alone (every refusal and the waiting lines), or --quiet=76 (running: the task already runs) or --quiet=75 (busy: the slots are busy) for one reason, with "="`},
		{"zero lock timeout", []string{"start", "--lock-timeout", "0s", "x", "--", "true"}, "crew: --lock-timeout must be positive, not 0s"},
		{"negative grace", []string{"start", "--grace", "-1s", "x", "--", "true"}, "crew: --grace must not be negative"},
		{"unknown command", []string{"frobnicate"}, `crew: unknown command "frobnicate" for "crew"`},
		{"init max zero", []string{"init", "--max", "0"}, "crew: --max must be at least 1, not 0"},
		{"init max not a number", []string{"init", "--max", "abc"}, `crew: --max "abc": not a whole number`},
		{"stop grace without unit", []string{"stop", "--grace", "5", "x"}, `crew: --grace "5": not a duration; give a number and a unit, as in --grace=5s`},
		{"init takes no args", []string{"init", "extra"}, `unknown command "extra" for "crew init"`},
		{"status too many args", []string{"status", "a", "b"}, "crew: accepts at most 1 arg(s), received 2"},
		{"status bad task", []string{"status", "bad\nname"}, "crew: invalid task name"},
		{"status unknown run", []string{"status", "r-20260101T000000.000000000Z-0000000000000000"}, "crew: no run r-20260101T000000.000000000Z-0000000000000000 in the state root " + root},
		{"recover zero timeout", []string{"recover", "--timeout", "0s"}, "crew: --timeout must be positive"},
		{"recover takes no args", []string{"recover", "now"}, `unknown command "now" for "crew recover"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := crew(t, append([]string{"--root", root}, c.args...)...)
			assert.Equal(t, exitUsage, r.code, r.stderr)
			assert.Contains(t, r.stderr, c.stderr)
			assert.True(t, strings.HasPrefix(r.stderr, "crew: "), r.stderr)
			assert.Contains(t, r.stderr, "--help' for usage.")
			assert.Empty(t, r.stdout, "errors never go to stdout")
		})
	}
	assert.NoDirExists(t, root, "no usage error created the state root")
}

func TestExitCodeFor(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("context: %w", err) }
	cases := []struct {
		name string
		err  error
		code int
	}{
		{"nil", nil, 0},
		{"slots busy", &vocab.RefusedError{Kind: vocab.SlotsBusy}, 75},
		{"task active", &vocab.RefusedError{Kind: vocab.TaskActive, Holders: []admission.Holder{{}}}, 76},
		{"wrapped slots busy", wrap(&vocab.RefusedError{Kind: vocab.SlotsBusy}), 75},
		{"wrapped task active", wrap(&vocab.RefusedError{Kind: vocab.TaskActive, Holders: []admission.Holder{{}}}), 76},
		{"dispatch usage", &vocab.UsageError{Err: errors.New("bad")}, 64},
		{"cli usage", &usageError{errors.New("bad flag")}, 64},
		{"wrapped usage", wrap(&vocab.UsageError{Err: errors.New("bad")}), 64},
		{"not found", &vocab.LaunchError{NotFound: true}, 127},
		{"not executable", &vocab.LaunchError{}, 126},
		{"command's own exit status", &vocab.ExitError{Code: 3}, 3},
		{"command killed by SIGKILL", wrap(&vocab.ExitError{Code: 137}), 137},
		{"unknown run", &vocab.NotFoundError{Err: errors.New("x")}, 64},
		{"recover items failed", &itemsFailedError{2}, 1},
		{"no log", &noLogError{"x"}, 1},
		{"wait gave up", &waitGaveUpError{"x"}, 75},
		{"signalled INT", &vocab.SignalledError{Signal: syscall.SIGINT}, 130},
		{"signalled TERM", &vocab.SignalledError{Signal: syscall.SIGTERM}, 143},
		{"signalled HUP", &vocab.SignalledError{Signal: syscall.SIGHUP}, 129},
		{"not permitted", wrap(&vocab.NotPermittedError{Err: errors.New("another user's run")}), 77},
		{"internal", &vocab.InternalError{Err: errors.New("disk full")}, 125},
		{"lock timeout", &vocab.LockTimeoutError{}, 125},
		{"config", &vocab.ConfigError{Path: "crew.json", Err: errors.New("bad")}, 125},
		{"other", errors.New("something else"), 125},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.code, exitCodeFor(c.err))
		})
	}
	assert.Equal(t, 75, exitSlotsBusy)
	assert.Equal(t, 76, exitTaskActive)
	assert.Equal(t, 125, exitCrewFailure)
	assert.Equal(t, 126, exitNotExecutable)
	assert.Equal(t, 127, exitNotFound)
}

func TestStateRootPrecedence(t *testing.T) {
	env := func(m map[string]string) func(string) string {
		return func(k string) string { return m[k] }
	}
	all := map[string]string{"CREW_ROOT": "/env/crew", "XDG_STATE_HOME": "/xdg", "HOME": "/home/me"}
	cases := []struct {
		name string
		flag string
		env  map[string]string
		want string
	}{
		{"flag wins", "/flag/root", all, "/flag/root"},
		{"CREW_ROOT", "", all, "/env/crew"},
		{"XDG_STATE_HOME", "", map[string]string{"XDG_STATE_HOME": "/xdg", "HOME": "/home/me"}, "/xdg/crew"},
		{"HOME", "", map[string]string{"HOME": "/home/me"}, "/home/me/.local/state/crew"},
		{"empty CREW_ROOT is unset", "", map[string]string{"CREW_ROOT": "", "HOME": "/home/me"}, "/home/me/.local/state/crew"},
		{"cleaned", "/flag//root/../root2/", nil, "/flag/root2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := &globalOptions{root: c.flag, getenv: env(c.env)}
			got, err := g.stateRoot()
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			d, err := g.openRoot()
			require.NoError(t, err)
			assert.Equal(t, c.want, d.Logs.Root())
		})
	}

	t.Run("relative root is made absolute", func(t *testing.T) {
		wd, err := os.Getwd()
		require.NoError(t, err)
		g := &globalOptions{root: "rel/state", getenv: env(nil)}
		got, err := g.stateRoot()
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(wd, "rel", "state"), got)
	})

	t.Run("nothing set", func(t *testing.T) {
		g := &globalOptions{getenv: env(nil)}
		_, err := g.stateRoot()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "set --root, CREW_ROOT, XDG_STATE_HOME or HOME")
		_, err = g.openRoot()
		require.Error(t, err)
		assert.Equal(t, exitCrewFailure, exitCodeFor(err))
	})
}

func TestRootFlagOverridesEnvironment(t *testing.T) {
	fromEnv := newRoot(t)
	t.Setenv("CREW_ROOT", fromEnv)
	root := newRoot(t)
	r := crew(t, "--root", root, "init", "--max", "2")
	require.Equal(t, 0, r.code, r.stderr)
	assert.FileExists(t, filepath.Join(root, "crew.json"))
	assert.NoDirExists(t, fromEnv)

	// Without the flag, CREW_ROOT is used (run() reads the real environment).
	r = crew(t, "init", "--max", "3")
	require.Equal(t, 0, r.code, r.stderr)
	assert.FileExists(t, filepath.Join(fromEnv, "crew.json"))
}

func TestStartHelpShowsExitCodes(t *testing.T) {
	r := crew(t, "start", "--help")
	assert.Equal(t, 0, r.code)
	assert.Empty(t, r.stderr)
	assert.Contains(t, r.stdout, "Exit codes:")
	for _, code := range []string{"64 usage error", "75 not admitted, all slots busy", "76 not admitted, the task already runs",
		"78 a nested start", "124 --timeout", "125 crew itself failed", "126 not executable", "127 not found"} {
		assert.Contains(t, strings.ReplaceAll(r.stdout, "\n", " "), " "+code, "exit code %s in the summary", code)
	}
	assert.Contains(t, r.stdout, "--force")
	assert.Contains(t, r.stdout, "--lock-timeout")
	assert.Contains(t, r.stdout, "--grace")
	assert.Contains(t, r.stdout, "--root")
}

// statusJSON is the part of `crew status --json` the tests look at, decoded
// without the dispatch types so that the wire names are checked.
type statusJSON struct {
	Version           *int                     `json:"version"`
	Root              string                   `json:"root"`
	ConfigPath        string                   `json:"configPath"`
	ConfigExists      bool                     `json:"configExists"`
	MaximumInProgress int                      `json:"maximumInProgress"`
	SlotsInUse        int                      `json:"slotsInUse"`
	Active            []map[string]any         `json:"active"`
	Finished          []map[string]any         `json:"finished"`
	Problems          []map[string]interface{} `json:"problems"`
}

func statusOf(t *testing.T, root string, args ...string) statusJSON {
	t.Helper()
	r := crew(t, append([]string{"--root", root, "status", "--json"}, args...)...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, r.stderr)
	var s statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
	return s
}

func TestStatusJSONOnMissingRoot(t *testing.T) {
	root := newRoot(t)
	s := statusOf(t, root)
	require.NotNil(t, s.Version)
	assert.Equal(t, 1, *s.Version)
	assert.Equal(t, root, s.Root)
	assert.Equal(t, filepath.Join(root, "crew.json"), s.ConfigPath)
	assert.False(t, s.ConfigExists)
	assert.Equal(t, 4, s.MaximumInProgress)
	assert.Equal(t, 0, s.SlotsInUse)
	assert.NotNil(t, s.Active, `"active": [], not null`)
	assert.NotNil(t, s.Finished)
	assert.NotNil(t, s.Problems)
	assert.NoDirExists(t, root, "status creates nothing")

	r := crew(t, "--root", root, "status")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "Slots: 0/4 in use")
	assert.Contains(t, r.stdout, "no config, default cap")
	assert.NoDirExists(t, root)
}

func TestInitThenStatus(t *testing.T) {
	root := newRoot(t)
	r := crew(t, "--root", root, "init", "--max", "3")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, r.stdout, "init prints messages, not data")
	assert.Contains(t, r.stderr, "crew: "+filepath.Join(root, "crew.json")+": maximumInProgress 3")

	s := statusOf(t, root)
	assert.Equal(t, 3, s.MaximumInProgress)
	assert.True(t, s.ConfigExists)

	r = crew(t, "--root", root, "init")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "maximumInProgress 3", "init without --max keeps the cap")
	assert.Equal(t, 3, statusOf(t, root).MaximumInProgress)

	r = crew(t, "--root", root, "init", "--max", "5")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "maximumInProgress 5 (was 3)")
	assert.Equal(t, 5, statusOf(t, root).MaximumInProgress)
}

func TestStartThroughTheCLI(t *testing.T) {
	root := newRoot(t)
	r := crew(t, "--root", root, "start", "greet", "--", "sh", "-c", "echo hello; echo warn >&2; exit 7")
	assert.Equal(t, 7, r.code, "crew exits with the command's exit code")
	assert.Equal(t, "hello\n", r.stdout)
	assert.Equal(t, "warn\n", r.stderr)

	s := statusOf(t, root)
	require.Len(t, s.Finished, 1)
	run := s.Finished[0]
	assert.Equal(t, "greet", run["task"])
	assert.Equal(t, "failed", run["state"])
	assert.EqualValues(t, 7, run["exitCode"])
	for _, field := range []string{"runId", "command", "host", "createdAt", "startedAt", "finishedAt", "reason",
		"supervisorPid", "taskPid", "pgid", "forced", "ownerAlive", "supervisorAlive", "orphaned", "holdsSlot", "logPath"} {
		assert.Contains(t, run, field)
	}
	id, _ := run["runId"].(string)
	require.True(t, record.LooksLikeRunID(id), id)

	// One run, by id, as JSON and as text.
	r = crew(t, "--root", root, "status", id, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var one map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &one))
	assert.Equal(t, id, one["runId"])
	r = crew(t, "--root", root, "status", id)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Exit code:")
	assert.Contains(t, r.stdout, "command exited with status 7")

	// Flags between the task and the dash are crew's; after it, the command's.
	r = crew(t, "--root", root, "start", "echo", "--grace", "1s", "--", "echo", "--grace", "x")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "--grace x\n", r.stdout)
}

func TestStartRefusalsAndLaunchErrors(t *testing.T) {
	root := newRoot(t)
	require.Equal(t, 0, crew(t, "--root", root, "init", "--max", "1").code)
	busyID := holdSlot(t, root, "busy")

	r := crew(t, "--root", root, "start", "other", "--", "echo", "never")
	assert.Equal(t, 75, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "crew: other: not admitted: all slots are busy (1/1 in use)")
	assert.NotContains(t, r.stderr, "--help' for usage", "a refusal is not a usage error")

	r = crew(t, "--root", root, "start", "busy", "--", "echo", "never")
	assert.Equal(t, 76, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, `crew: busy: not admitted: task "busy" is already running as `+string(busyID))

	r = crew(t, "--root", root, "start", "--force", "forced", "--", "echo", "forced")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "forced\n", r.stdout)

	r = crew(t, "--root", root, "start", "--force", "missing", "--", "crew-test-no-such-command-7f3a")
	assert.Equal(t, 127, r.code)
	assert.Contains(t, r.stderr, "crew: missing: command not found: crew-test-no-such-command-7f3a")

	s := statusOf(t, root)
	assert.Equal(t, 1, s.SlotsInUse)
	require.Len(t, s.Active, 1)
	assert.Equal(t, "busy", s.Active[0]["task"])
	require.Len(t, s.Finished, 2)
	assert.Equal(t, "failed", s.Finished[0]["state"])
	assert.Equal(t, true, s.Finished[1]["forced"])

	// The text status names what holds the slots.
	r = crew(t, "--root", root, "status")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "Slots: 1/1 in use")
	assert.Contains(t, r.stdout, busyID.Short())
	assert.Contains(t, r.stdout, "busy")
}

func TestLockTimeoutIsCrewFailure(t *testing.T) {
	root := newRoot(t)
	d := dispatch.New(root)
	require.NoError(t, d.Logs.Ensure())
	lock, err := d.Logs.LockAdmission(context.Background(), time.Second)
	require.NoError(t, err)
	defer lock.Release()

	r := crew(t, "--root", root, "start", "--lock-timeout", "50ms", "x", "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "crew: x: timed out after")
	assert.Contains(t, r.stderr, fmt.Sprintf("pid %d", os.Getpid()))
	assert.Empty(t, r.stdout)
}

// A corrupt config fails what needs it (125), but not status, which shows
// the problem.
func TestCorruptConfigIsCrewFailure(t *testing.T) {
	root := newRoot(t)
	require.NoError(t, os.MkdirAll(root, 0o700))
	cfg := filepath.Join(root, "crew.json")
	require.NoError(t, os.WriteFile(cfg, []byte("{"), 0o600))
	for _, args := range [][]string{{"start", "x", "--", "true"}, {"init"}} {
		r := crew(t, append([]string{"--root", root}, args...)...)
		assert.Equal(t, 125, r.code, "%v: %s", args, r.stderr)
		// Not named after the task, even for a start: the message starts
		// PATH:LINE:COL, compiler-style, for editors to jump to.
		assert.Contains(t, r.stderr, "crew: "+cfg+":1:2: malformed JSON")
		assert.Empty(t, r.stdout)
	}
	r := crew(t, "--root", root, "status")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Config problem: "+cfg+":1:2: malformed JSON")
	r = crew(t, "--root", root, "init", "--max", "2")
	assert.Equal(t, 0, r.code, "init --max repairs the config: %s", r.stderr)
	assert.Contains(t, r.stderr, "moved it to "+cfg+".broken-")
}

func TestRecoverThroughTheCLI(t *testing.T) {
	root := newRoot(t)

	r := crew(t, "--root", root, "recover")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "nothing to do")
	assert.NoDirExists(t, root)

	d := dispatch.New(root)
	res, err := d.Admit(context.Background(), vocab.AdmitRequest{Task: "dead", Command: []string{"true"}, LockTimeout: time.Second})
	require.NoError(t, err)
	res.Run.Release()

	r = crew(t, "--root", root, "recover", "--dry-run", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var report struct {
		Version int  `json:"version"`
		DryRun  bool `json:"dryRun"`
		Items   []struct {
			RunID   string `json:"runId"`
			Task    string `json:"task"`
			Path    string `json:"path"`
			Outcome string `json:"outcome"`
			Reason  string `json:"reason"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report), r.stdout)
	assert.Equal(t, 1, report.Version)
	assert.True(t, report.DryRun)
	require.Len(t, report.Items, 1)
	assert.Equal(t, "finalized", report.Items[0].Outcome)
	assert.Equal(t, string(res.Rec.RunID), report.Items[0].RunID)
	assert.Equal(t, "dead", report.Items[0].Task)

	r = crew(t, "--root", root, "recover")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "finalized 1")
	rec, err := d.Logs.ReadRun(res.Rec.RunID)
	require.NoError(t, err)
	assert.Equal(t, record.Interrupted, rec.State)

	r = crew(t, "--root", root, "recover")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "nothing to do")

	// Items not reached in time make recover exit 1.
	r = crew(t, "--root", root, "recover", "--timeout", "1ns")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "crew: recover: 2 item(s) failed") // the leftover sweep, the index
	assert.Contains(t, r.stdout, "failed 2")
}
