package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

func TestWaitFlag(t *testing.T) {
	var w waitFlag
	assert.Equal(t, "", w.String())
	assert.Equal(t, "duration", w.Type())

	require.NoError(t, w.Set("forever"))
	assert.True(t, w.set)
	assert.Zero(t, w.timeout)
	assert.Equal(t, "forever", w.String())

	require.NoError(t, w.Set("90s"))
	assert.Equal(t, 90*time.Second, w.timeout)
	assert.Equal(t, "1m30s", w.String())

	for _, bad := range []string{"soon", "-1m", "10"} {
		var w waitFlag
		assert.Error(t, w.Set(bad), bad)
		assert.False(t, w.set, bad)
	}
	// --wait=0 does not wait: as no --wait, even after a --wait.
	for _, zero := range []string{"0", "0s"} {
		w := waitFlag{set: true}
		require.NoError(t, w.Set(zero), zero)
		assert.False(t, w.set, zero)
		assert.Equal(t, "", w.String(), zero)
	}
}

func TestQueueAndPoolUsageErrors(t *testing.T) {
	root := newRoot(t)
	require.Equal(t, 0, crew(t, "--root", root, "init", "--pool", "deploy=1").code)
	cases := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"wait with force", []string{"start", "--wait", "--force", "x", "--", "true"}, "--wait and --force do not go together"},
		{"bad wait", []string{"start", "--wait=soon", "x", "--", "true"}, "not a duration"},
		{"negative wait", []string{"start", "--wait=-1s", "x", "--", "true"}, "must not be negative (--wait=0 does not wait)"},
		{"unknown pool", []string{"start", "--pool", "nope", "x", "--", "true"}, `unknown pool "nope"; configured pools: deploy`},
		{"pool without size", []string{"init", "--pool", "deploy"}, `--pool wants NAME=N (such as deploy=1), not "deploy"`},
		{"pool size not a number", []string{"init", "--pool", "deploy=one"}, "--pool wants NAME=N"},
		{"pool without name", []string{"init", "--pool", "=2"}, "--pool wants NAME=N"},
		{"negative pool", []string{"init", "--pool", "deploy=-1"}, "cap must be at least 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := crew(t, append([]string{"--root", root}, c.args...)...)
			assert.Equal(t, exitUsage, r.code, r.stderr)
			assert.Contains(t, r.stderr, c.stderr)
			assert.Empty(t, r.stdout)
		})
	}
	s := statusOf(t, root)
	assert.Empty(t, s.Active)
	assert.Empty(t, s.Finished, "no usage error ran anything")
}

func TestStartWaitGivesUp(t *testing.T) {
	root := newRoot(t)
	require.Equal(t, 0, crew(t, "--root", root, "init", "--max", "1").code)
	busyID := holdSlot(t, root, "busy")

	r := crew(t, "--root", root, "start", "--wait=50ms", "other", "--", "echo", "never")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "crew: other: waiting for a slot: 1st in line, 1/1 slots busy")
	assert.Contains(t, r.stderr, "crew: other: not admitted: gave up after waiting 50ms")

	r = crew(t, "--root", root, "start", "--wait=50ms", "busy", "--", "echo", "never")
	assert.Equal(t, 76, r.code, r.stderr)
	assert.Contains(t, r.stderr, `crew: busy: waiting for its run `+busyID.Short()+` to end (running `)
}

func TestStartWaitThenRun(t *testing.T) {
	root := newRoot(t)
	r := crew(t, "--root", root, "start", "--wait", "now", "--", "echo", "ran")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "ran\n", r.stdout)
}

func TestDescribeWait(t *testing.T) {
	since := time.Now().Add(-time.Minute)
	run := &admission.Holder{RunID: "r-20261129T100211.123456789Z-3f2a9c0d1e4b5a69", Task: "build", Since: since}
	cases := []struct {
		p    vocab.WaitProgress
		want string
	}{
		{vocab.WaitProgress{Position: 3, Reason: admission.WaitSlot, InUse: 4, Maximum: 4, Oldest: run},
			"waiting for a slot: 3rd in line, 4/4 slots busy (oldest: build 3f2a9c0d, 1m0s)"},
		{vocab.WaitProgress{Position: 1, Reason: admission.WaitPool, Pool: "deploy", PoolInUse: 1, PoolMax: 1, InUse: 2, Maximum: 4},
			"waiting for a slot in pool deploy: 1st in line, 1/1 pool slots busy (2/4 in all)"},
		{vocab.WaitProgress{Position: 2, Reason: admission.WaitTask, BlockingRun: run},
			"waiting for its run 3f2a9c0d to end (running 1m0s), 2nd in line"},
		{vocab.WaitProgress{Position: 12, Reason: admission.WaitTask},
			"waiting for an older waiting start of the task to go first, 12th in line"},
		{vocab.WaitProgress{Reason: admission.WaitQueue, QueueErr: "cannot read the queue of waiting starts (list the queue in /r/queue: input/output error)"},
			"waiting, its place in line kept, for the queue to be readable (retrying): cannot read the queue of waiting starts (list the queue in /r/queue: input/output error)"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, describeWait(c.p))
	}
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 22: "22nd", 101: "101st", 111: "111th"} {
		assert.Equal(t, want, ordinal(n))
	}
}

// Off a terminal, the wait view prints one line when the wait starts and
// one when the run is admitted.
func TestWaitViewOffTerminal(t *testing.T) {
	var buf bytes.Buffer
	v := newWaitView(&buf, "t", false)
	id := record.RunID("r-20261129T100211.123456789Z-3f2a9c0d1e4b5a69")
	p := vocab.WaitProgress{RunID: id, Position: 1, Reason: admission.WaitSlot, InUse: 1, Maximum: 1, Since: time.Now()}
	v.update(p)
	p.Position = 1
	v.update(p)
	v.update(vocab.WaitProgress{RunID: id, Admitted: true, Since: p.Since})
	v.close()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, buf.String())
	assert.Equal(t, "crew: t: waiting for a slot: 1st in line, 1/1 slots busy", lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "crew: t: admitted as run 3f2a9c0d after waiting "), lines[1])
	assert.NotContains(t, buf.String(), "\x1b[", "no terminal escapes off a terminal")
}

// Off a terminal, a config problem gets a line of its own when it appears,
// changes and goes, so that a CI log says why a waiter is stuck.
func TestWaitViewShowsAConfigProblem(t *testing.T) {
	var buf bytes.Buffer
	v := newWaitView(&buf, "t", false)
	p := vocab.WaitProgress{RunID: "r-1", Position: 1, Reason: admission.WaitSlot, InUse: 1, Maximum: 1, Since: time.Now()}
	v.update(p)
	broken := p
	broken.Reason, broken.ConfigErr = admission.WaitConfig, "/r/crew.json:1:2: malformed JSON: x; fix it"
	v.update(broken)
	v.update(broken) // unchanged: no new line
	broken.ConfigErr = "/r/crew.json: no \"version\" field; fix it"
	v.update(broken)
	v.update(p) // fixed
	v.close()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 4, buf.String())
	assert.Equal(t, "crew: t: waiting, 1st in line, for crew.json to be fixed (retrying): /r/crew.json:1:2: malformed JSON: x; fix it", lines[1])
	assert.Equal(t, `crew: t: waiting, 1st in line, for crew.json to be fixed (retrying): /r/crew.json: no "version" field; fix it`, lines[2])
	assert.Equal(t, "crew: t: waiting for a slot: 1st in line, 1/1 slots busy", lines[3])
}

// On a terminal, the one wait line shows the problem.
func TestWaitViewOnTerminalShowsAConfigProblem(t *testing.T) {
	var buf bytes.Buffer
	v := &waitView{w: &buf, terminal: true, task: "t", stop: make(chan struct{})}
	v.update(vocab.WaitProgress{RunID: "r-1", Position: 2, Reason: admission.WaitConfig, ConfigErr: "/r/crew.json:1:2: bad", Since: time.Now()})
	v.close()
	assert.Contains(t, buf.String(), "\r\x1b[Kcrew: t: waiting, 2nd in line, for crew.json to be fixed (retrying): /r/crew.json:1:2: bad")
}

// --quiet: not a word about waiting or admission.
func TestWaitViewQuiet(t *testing.T) {
	var buf bytes.Buffer
	v := newWaitView(&buf, "t", true)
	p := vocab.WaitProgress{RunID: "r-1", Position: 1, Reason: admission.WaitSlot, InUse: 1, Maximum: 1, Since: time.Now()}
	v.update(p)
	v.update(vocab.WaitProgress{RunID: "r-1", Admitted: true, Since: p.Since})
	v.close()
	assert.Empty(t, buf.String())
}
