package e2e

// Nested starts (issue 12, item 8): a command run by crew that itself
// calls crew start for a slot only its own run (or that run's ancestors)
// holds is refused with exit 78 instead of waiting forever.

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nested runs `crew start ARGS` as the outer run's command, which exits
// with the nested start's code. The bound only guards against a hang.
func (e *env) nested(outerTask string, inner ...string) result {
	e.t.Helper()
	p := e.start(nil, append([]string{"start", outerTask, "--", e.bin}, inner...)...)
	return p.wait(e.t, time.Minute)
}

// TestNestedStartAtCapOneIsRefused: at cap 1 the outer run holds the only
// slot; a nested --wait start (and a plain one, and one that chose its own
// refusal code) is refused with 78, naming the outer run and its task.
func TestNestedStartAtCapOneIsRefused(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	for _, inner := range [][]string{
		{"start", "--wait", "inner", "--", "true"},
		{"start", "inner", "--", "true"},
		{"start", "--wait=1h", "--quiet", "--refused-exit", "0", "inner", "--", "true"},
	} {
		r := e.nested("outer", inner...)
		assert.Equal(t, 78, r.Code, "%v: %s", inner, r.Stderr)
		assert.Contains(t, r.Stderr, `crew: inner: not admitted: it would wait forever for a slot (1/1 in use), all held by runs it was started from: task "outer" (run r-`, inner)
		assert.Contains(t, r.Stderr, "Raise the cap (crew init --max 2), or run the command without crew start", inner)
		outer := e.status("outer").Finished[0]
		assert.Contains(t, r.Stderr, outer.RunID, "the message names the outer run")
		assert.Equal(t, 78, *outer.ExitCode)
	}
	assert.Empty(t, e.queue().Queue, "the refused waiter left no ticket")
	assert.Empty(t, e.status("inner").Finished, "nothing of inner ran")
}

// TestNestedStartOfItsOwnTaskIsRefused: with slots to spare, a nested
// start of the outer run's own task is blocked by that very run.
func TestNestedStartOfItsOwnTaskIsRefused(t *testing.T) {
	e := newEnv(t)
	e.initMax(4)
	r := e.nested("same", "start", "--wait", "same", "--", "true")
	assert.Equal(t, 78, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, `crew: same: not admitted: it would wait forever for its own task's active run, which is the run it was started from: task "same" (run r-`)
	assert.Contains(t, r.Stderr, "Give the nested start a task of its own")
}

// TestNestedStartInAFullPoolIsRefused: the outer run holds its pool's
// only slot; a nested start in that pool is refused although global slots
// are free.
func TestNestedStartInAFullPoolIsRefused(t *testing.T) {
	e := newEnv(t)
	r := e.run("init", "--max", "4", "--pool", "deploy=1")
	require.Equal(t, 0, r.Code, r.Stderr)
	p := e.start(nil, "start", "--pool", "deploy", "outer", "--", e.bin, "start", "--wait", "--pool", "deploy", "inner", "--", "true")
	r = p.wait(t, time.Minute)
	assert.Equal(t, 78, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, `crew: inner: not admitted: it would wait forever for pool "deploy" (1/1 in use), all held by runs it was started from: task "outer"`)
	assert.Contains(t, r.Stderr, "Raise the pool's cap (crew init --pool deploy=2)")
}

// TestNestedChainIsFollowed: at cap 2, outer runs middle, which runs a
// waiting inner start: both slots are held by inner's ancestors (middle's
// record names outer as its parent), nearest named first.
func TestNestedChainIsFollowed(t *testing.T) {
	e := newEnv(t)
	e.initMax(2)
	r := e.nested("outer", "start", "middle", "--", e.bin, "start", "--wait", "inner", "--", "true")
	assert.Equal(t, 78, r.Code, r.Stderr)
	assert.Regexp(t, `all held by runs it was started from: task "middle" \(run r-[^)]*\), task "outer" \(run r-`, r.Stderr)
	middle := e.status("middle").Finished[0]
	outer := e.status("outer").Finished[0]
	var rec map[string]any
	res := e.run("status", "--json", middle.RunID)
	require.NoError(t, json.Unmarshal([]byte(res.Stdout), &rec), res.Stdout)
	assert.Equal(t, outer.RunID, rec["parentRunId"], "middle's record names its parent")
}

// TestNestedStartWithAnUnrelatedRunWaitsAndRuns: at cap 2, with the outer
// run and an unrelated run holding the slots, the nested start is not
// refused (the unrelated run will end): it waits, then runs. Its command
// sees its own run id, not the outer one's.
func TestNestedStartWithAnUnrelatedRunWaitsAndRuns(t *testing.T) {
	e := newEnv(t)
	e.initMax(2)
	release, other := e.holdSlot("other")
	outer := e.start(nil, "start", "outer", "--", e.bin, "start", "--wait", "inner", "--", "sh", "-c", `echo "inner-id=$CREW_RUN_ID"`)
	e.waitQueued("inner")
	release()
	other.wait(t, time.Minute)
	r := outer.wait(t, time.Minute)
	require.Equal(t, 0, r.Code, r.Stderr)
	inner := e.status("inner").Finished[0]
	assert.Equal(t, "succeeded", inner.State)
	assert.Contains(t, r.Stdout, "inner-id="+inner.RunID+"\n", "the nested run's CREW_RUN_ID is its own")
	assert.NotContains(t, r.Stderr, "would wait forever")
	assert.True(t, strings.Contains(r.Stderr, "crew: inner: waiting for a slot"), r.Stderr)
}
