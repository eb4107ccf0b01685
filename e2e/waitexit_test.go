package e2e

// crew wait tells a run that timed out from a wait that gave up (issue 24,
// item 9): 124 is the run's own exit code (its --timeout ran out), 75
// (EX_TEMPFAIL, as a --wait=D start that gives up) the wait's --timeout
// running out first; --json says which with gaveUp.

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type waitJSON struct {
	Version  int       `json:"version"`
	Runs     []runJSON `json:"runs"`
	ExitCode int       `json:"exitCode"`
	GaveUp   *bool     `json:"gaveUp"`
}

func (e *env) waitJSON(args ...string) (waitJSON, result) {
	e.t.Helper()
	r := e.run(append([]string{"wait", "--json"}, args...)...)
	var w waitJSON
	require.NoError(e.t, json.Unmarshal([]byte(r.Stdout), &w), "crew wait --json %v: %q %s", args, r.Stdout, r.Stderr)
	return w, r
}

func TestWaitTellsATimedOutRunFromGivingUp(t *testing.T) {
	e := newEnv(t)
	r := e.run("start", "--timeout", "100ms", "slowpoke", "--", "sleep", "30")
	require.Equal(t, 124, r.Code, r.Stderr)
	w, r := e.waitJSON("slowpoke")
	assert.Equal(t, 124, r.Code, "the run's own timeout: %s", r.Stderr)
	assert.Equal(t, 124, w.ExitCode)
	require.NotNil(t, w.GaveUp)
	assert.False(t, *w.GaveUp)

	gate, openGate := e.gate("slow")
	p := e.start(nil, append([]string{"start", "slow", "--"}, waitCmd(gate)...)...)
	run := e.activeRun("slow")
	r = e.run("wait", "--timeout", "200ms", "slow")
	assert.Equal(t, 75, r.Code, r.Stderr)
	assert.Equal(t, "crew: slow: gave up after 200ms: run "+run.RunID+" has not finished (crew wait exits 75)\n", r.Stderr)
	w, r = e.waitJSON("--timeout", "100ms", "slowpoke", "slow")
	assert.Equal(t, 75, r.Code, r.Stderr)
	assert.Equal(t, 75, w.ExitCode)
	require.NotNil(t, w.GaveUp)
	assert.True(t, *w.GaveUp)
	var states []string
	for _, v := range w.Runs {
		states = append(states, v.Task+":"+v.State)
	}
	assert.Equal(t, "slowpoke:failed slow:running", strings.Join(states, " "), "every run, as it is now")
	openGate()
	require.Equal(t, 0, p.wait(t, 10*time.Second).Code)
}
