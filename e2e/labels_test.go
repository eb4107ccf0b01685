package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 24 item 7: labels that cannot be stored, and crew wait and status
// given labels where they do not fit, are usage errors (exit 64) that say
// what is accepted; nothing is started.
func TestLabelUsageErrors(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 0, e.run("start", "--label", "pipeline=1", "done", "--", "true").Code)
	id := e.history().Runs[0].RunID
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"start", "--label", "pipeline", "t", "--", "true"}, `crew: --label "pipeline": label "pipeline" has no "=": give KEY=VALUE, as in pipeline=1234`},
		{[]string{"start", "--label", "pipeline=", "t", "--", "true"}, `crew: --label "pipeline=": label pipeline has an empty value: give KEY=VALUE (an unset variable in --label pipeline=$VAR?)`},
		{[]string{"start", "--label", "=1", "t", "--", "true"}, `crew: --label "=1": label key is empty`},
		{[]string{"start", "--label", "a b=1", "t", "--", "true"}, `crew: --label "a b=1": label key "a b" has a space or "="; keys are one word`},
		{[]string{"start", "--label", "k=" + strings.Repeat("v", 257), "t", "--", "true"}, "label k's value is 257 bytes long; the limit is 256"},
		{[]string{"start", "--label", "k=a\tb", "t", "--", "true"}, `label value "a\tb" has a character that does not print (U+0009)`},
		{[]string{"start", "--label", "k=1", "--label", "k=2", "t", "--", "true"}, "label k is given twice (k=1 and k=2); give each key once"},
		{[]string{"history", "--label", "x"}, `crew: --label "x": label "x" has no "="`},
		{[]string{"status", "--label", "x"}, `crew: --label "x": label "x" has no "="`},
		{[]string{"wait", "--label", "x"}, `crew: --label "x": label "x" has no "="`},
		{[]string{"wait"}, "crew: give the runs to wait for: RUN or TASK arguments, or --label KEY=VALUE"},
		{[]string{"wait", "done", "--label", "pipeline=1"}, `crew: give RUN|TASK arguments or --label, not both (got ["done"] and --label pipeline=1)`},
		{[]string{"wait", "--label", "pipeline=2"}, "crew: no run has the label pipeline=2 in the state root " + e.root + " (waiting, active or finished); crew wait --label waits only for runs started before it"},
		{[]string{"status", id, "--label", "pipeline=1"}, "crew: --label selects among runs; it does not go with one run (" + id + "): give a TASK or nothing"},
	} {
		r := e.run(c.args...)
		assert.Equal(t, 64, r.Code, "%q: %s", c.args, r.Stderr)
		assert.Contains(t, r.Stderr, c.want, "%q", c.args)
		assert.Empty(t, r.Stdout, "%q", c.args)
	}
	assert.Len(t, e.history().Runs, 1, "no start with a bad label ran")
}

// A waiting start's labels are in its ticket: crew status RUN shows them,
// and status --label selects it, before its run record exists.
func TestWaitingStartLabels(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	waiter := e.start(nil, "start", "--wait", "--label", "pipeline=7", "queued", "--", "true")
	var id string
	eventually(t, 20*time.Second, "the start to wait in line", func() bool {
		q := e.queue().Queue
		if len(q) == 1 {
			id = q[0].RunID
		}
		return id != ""
	})
	r := e.run("status", id)
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Regexp(t, `(?m)^Labels: +pipeline=7$`, r.Stdout)
	r = e.run("status", "--label", "pipeline=7", "--json")
	var s struct {
		Active []json.RawMessage `json:"active"`
		Queue  []struct {
			RunID  string            `json:"runId"`
			Labels map[string]string `json:"labels"`
		} `json:"queue"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &s), r.Stdout)
	assert.Empty(t, s.Active, "the holder has no label")
	require.Len(t, s.Queue, 1)
	assert.Equal(t, map[string]string{"pipeline": "7"}, s.Queue[0].Labels)
	r = e.run("status", "--label", "pipeline=8", "--json")
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &s), r.Stdout)
	assert.Empty(t, s.Queue, "another label")

	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	require.Equal(t, 0, waiter.wait(t, 10*time.Second).Code)
	r = e.run("status", id)
	assert.Regexp(t, `(?m)^Labels: +pipeline=7$`, r.Stdout, "the run's record has them")
}
