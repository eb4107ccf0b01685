package e2e

import (
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
)

// Every user-facing error: its message and its exit code, and no state
// left behind by a refused call.
func TestUsageErrors(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"missing command", []string{"start", "build"}, "crew: missing command: give it after --, as in crew start build -- COMMAND [ARGS...]"},
		{"empty command after dash", []string{"start", "build", "--"}, "crew: missing command"},
		{"missing task", []string{"start"}, "crew: missing task name"},
		{"two tasks", []string{"start", "a", "b", "--", "true"}, `crew: expected one task name before --, got 2: ["a" "b"]`},
		{"empty task", []string{"start", "", "--", "true"}, "crew: invalid task name: task name is empty"},
		{"control character", []string{"start", "bad\nname", "--", "true"}, `crew: invalid task name: task name "bad\nname" has a control character (U+000A) at byte 3`},
		{"too long", []string{"start", strings.Repeat("x", 201), "--", "true"}, "crew: invalid task name: task name is 201 bytes long; the limit is 200"},
		{"invalid utf-8", []string{"start", "bad\xffname", "--", "true"}, "is not valid UTF-8"},
		{"unknown flag", []string{"start", "--bogus", "x", "--", "true"}, "crew: unknown flag: --bogus"},
		{"bad duration", []string{"start", "--grace", "soon", "x", "--", "true"}, `crew: --grace "soon": not a duration; give a number and a unit, as in --grace=90s (durations: 90s, 10m, 1h30m, 7d)`},
		{"zero lock timeout", []string{"start", "--lock-timeout", "0s", "x", "--", "true"}, "crew: --lock-timeout must be positive, not 0s"},
		{"unknown command", []string{"frobnicate"}, `crew: unknown command "frobnicate" for "crew"`},
		{"init max zero", []string{"init", "--max", "0"}, "crew: --max must be at least 1, not 0"},
		{"status too many args", []string{"status", "a", "b"}, "crew: accepts at most 1 arg(s), received 2"},
		{"status unknown run", []string{"status", "r-20260101T000000.000000000Z-0000000000000000"}, "crew: no run r-20260101T000000.000000000Z-0000000000000000 in the state root"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.run(c.args...)
			assert.Equal(t, 64, r.Code, r.Stderr)
			assert.Contains(t, r.Stderr, c.stderr)
			assert.Empty(t, r.Stdout, "errors never go to stdout")
		})
	}
	_, err := os.Stat(filepath.Join(e.root, "runs", "active"))
	if err == nil {
		entries, _ := os.ReadDir(filepath.Join(e.root, "runs", "active"))
		assert.Empty(t, entries, "no usage error created a run")
	}
}

func TestUnwritableRoot(t *testing.T) {
	e := newEnv(t)
	file := filepath.Join(e.dir, "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	r := e.run("--root", filepath.Join(file, "state"), "start", "x", "--", "true")
	assert.Equal(t, 125, r.Code)
	assert.Contains(t, r.Stderr, "crew: x: create state root "+filepath.Join(file, "state"))
	assert.Contains(t, r.Stderr, "not a directory")
}

func TestCorruptConfig(t *testing.T) {
	cases := map[string]struct{ content, place, msg string }{
		"malformed":       {"{", ":1:2: ", "malformed JSON"},
		"unknown version": {`{"version": 7, "maximumInProgress": 2}`, ": ", "unknown config version 7"},
		"unknown field":   {`{"version": 1, "maximumInProgres": 2}`, ": ", `unknown field "maximumInProgres"`},
		"zero cap":        {`{"version": 1, "maximumInProgress": 0}`, ": ", "maximumInProgress is 0; it must be at least 1"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.initMax(2)
			cfg := filepath.Join(e.root, "crew.json")
			require.NoError(t, os.WriteFile(cfg, []byte(c.content), 0o600))
			// A start refuses, compiler-style: PATH:LINE:COL: message.
			r := e.run("start", "x", "--", "true")
			assert.Equal(t, 125, r.Code, r.Stderr)
			assert.True(t, strings.HasPrefix(r.Stderr, "crew: "+cfg+c.place), r.Stderr)
			assert.Contains(t, r.Stderr, c.msg)
			assert.Contains(t, r.Stderr, "crew init --max N")
			// Status still works, and shows the problem.
			r = e.run("status")
			assert.Equal(t, 0, r.Code, r.Stderr)
			assert.Contains(t, r.Stdout, "Config problem: "+cfg+c.place)
			assert.Contains(t, r.Stdout, c.msg)
			entries, err := os.ReadDir(filepath.Join(e.root, "runs", "active"))
			require.NoError(t, err)
			assert.Empty(t, entries, "a corrupt config admits nothing")
			// init --max repairs it, keeping the broken file aside.
			r = e.run("init", "--max", "3")
			require.Equal(t, 0, r.Code, r.Stderr)
			assert.Contains(t, r.Stderr, "was unusable")
			assert.Equal(t, 3, e.status().MaximumInProgress)
		})
	}
}

// A corrupt record in the active set never crashes admission: with its
// owner lock free it holds no slot and is reported; with its owner lock
// held it fails closed and counts.
func TestCorruptActiveRecord(t *testing.T) {
	const id = "r-20260101T000000.000000000Z-00000000000000aa"
	setup := func(t *testing.T) (*env, string) {
		e := newEnv(t)
		e.initMax(1)
		path := filepath.Join(e.root, "runs", "active", id+".json")
		require.NoError(t, os.WriteFile(path, []byte(`{"version": 1, "runId": "trunc`), 0o600))
		return e, path
	}
	t.Run("owner gone", func(t *testing.T) {
		e, path := setup(t)
		r := e.run("start", "x", "--", "true")
		assert.Equal(t, 0, r.Code, r.Stderr)
		assert.Contains(t, r.Stderr, "crew: x: warning: run record "+path+": not a JSON run record")
		assert.Contains(t, r.Stderr, "its owner is gone, so it holds no slot; run `crew recover` to quarantine it")
		s := e.status()
		require.Len(t, s.Problems, 1)
		assert.Equal(t, path, s.Problems[0].Path)
		assert.False(t, s.Problems[0].HoldsSlot)
	})
	t.Run("owner alive", func(t *testing.T) {
		e, path := setup(t)
		lock := filepath.Join(e.root, "owners", id+".lock")
		holder := exec.Command("flock", lock, "sleep", "60")
		// flock runs sleep as its child: kill the whole group at the end
		// (before waiting for flock, which keeps the group id ours).
		holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, holder.Start())
		t.Cleanup(func() { _ = killChildGroup(holder, syscall.SIGKILL); _ = holder.Wait() })
		eventually(t, 5*time.Second, "flock to hold the owner lock", func() bool {
			s := e.status()
			return len(s.Problems) == 1 && s.Problems[0].HoldsSlot
		})
		r := e.run("start", "x", "--", "true")
		assert.Equal(t, 75, r.Code, r.Stderr)
		assert.Contains(t, r.Stderr, "crew: x: warning: run record "+path)
		assert.Contains(t, r.Stderr, "its owner is alive, so it is counted as holding a slot")
		assert.Contains(t, r.Stderr, "not admitted: all slots are busy (1/1 in use)")
		assert.Equal(t, 1, e.status().SlotsInUse)
	})
}

// TestLockTimeoutNamesTheHolder: a crew stuck inside admission makes the
// next one time out with an error that names it.
func TestLockTimeoutNamesTheHolder(t *testing.T) {
	e := newEnv(t)
	gate, openGate := e.gate("stuck")
	stuck := e.start([]string{"CREW_FAILPOINT=admission-locked:wait:" + gate}, "start", "stuck", "--", "true")
	eventually(t, 10*time.Second, "the holder to take the admission lock", func() bool { return exists(gate + ".reached") })
	host, _ := os.Hostname()

	begin := time.Now()
	r := e.run("start", "--lock-timeout", "300ms", "late", "--", "true")
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.GreaterOrEqual(t, time.Since(begin), 300*time.Millisecond)
	assert.Contains(t, r.Stderr, "crew: late: timed out after")
	assert.Contains(t, r.Stderr, "waiting for the admission lock on the state root "+e.root+",")
	assert.Contains(t, r.Stderr, fmt.Sprintf("held by pid %d on host %s since ", stuck.cmd.Process.Pid, host))
	openGate()
	assert.Equal(t, 0, stuck.wait(t, 10*time.Second).Code)
	assert.Empty(t, e.status("late").Finished)
}
