package e2e

// Issue 10, item 11: a hand-broken crew.json neither blinds operators nor
// empties the queue, and nothing it holds is dropped silently.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// configStatus is the part of `crew status --json` about the config.
type configStatus struct {
	MaximumInProgress int `json:"maximumInProgress"`
	SlotsInUse        int `json:"slotsInUse"`
	ConfigError       *struct {
		Path   string `json:"path"`
		Line   int    `json:"line"`
		Column int    `json:"column"`
		Error  string `json:"error"`
	} `json:"configError"`
	Active []runJSON `json:"active"`
	Queue  []struct {
		Task       string `json:"task"`
		Position   int    `json:"position"`
		WaitingFor string `json:"waitingFor"`
	} `json:"queue"`
}

func (e *env) configStatus() configStatus {
	e.t.Helper()
	r := e.run("status", "--json")
	require.Equal(e.t, 0, r.Code, "status works whatever crew.json holds: %s", r.Stderr)
	var s configStatus
	require.NoError(e.t, json.Unmarshal([]byte(r.Stdout), &s), r.Stdout)
	return s
}

const brokenConfig = "{\n  \"version\": 1,\n  \"maximumInProgress\": 3,\n  \"pools\": {\"test\": 2, \"deploy\": 1},\n}\n"

// The broken file: a trailing comma at line 5, column 1.
func breakConfig(t *testing.T, e *env) string {
	t.Helper()
	cfg := filepath.Join(e.root, "crew.json")
	require.NoError(t, os.WriteFile(cfg, []byte(brokenConfig), 0o600))
	return cfg
}

// With crew.json broken by hand: status still shows the runs and the
// queue, and the problem (exit 0); a waiting start keeps its place and
// says why it waits; a plain start refuses with 125 and PATH:LINE:COL;
// `crew init --max 3 --pool test=2` moves the broken file aside, says so,
// and the waiter goes in.
func TestBrokenConfigKeepsTheQueueAndTheOperatorInformed(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	waiter := e.start(nil, "start", "--wait", "waiter", "--", "true")
	e.waitQueued("waiter")
	cfg := breakConfig(t, e)
	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)

	// The waiter retries (every few seconds), keeps its place, and says why.
	problem := cfg + ":5:1: malformed JSON: invalid character '}' looking for beginning of object key string"
	eventually(t, 15*time.Second, "the waiter to show the config problem", func() bool {
		return strings.Contains(waiter.errb.String(), "crew: waiter: waiting, 1st in line, for crew.json to be fixed (retrying): "+problem)
	})
	s := e.configStatus()
	require.NotNil(t, s.ConfigError)
	assert.Equal(t, cfg, s.ConfigError.Path)
	assert.Equal(t, [2]int{5, 1}, [2]int{s.ConfigError.Line, s.ConfigError.Column})
	assert.Equal(t, problem+"; fix it, or rewrite it with `crew init --max N` (which moves this file aside)", s.ConfigError.Error)
	assert.Zero(t, s.MaximumInProgress, "the cap is unknown")
	require.Len(t, s.Queue, 1)
	assert.Equal(t, "waiter", s.Queue[0].Task)
	assert.Equal(t, "config", s.Queue[0].WaitingFor)
	text := e.run("status")
	require.Equal(t, 0, text.Code, text.Stderr)
	assert.Contains(t, text.Stdout, "Config problem: "+problem)
	assert.Contains(t, text.Stdout, "Slots: 0 in use; the cap is unknown, and no start is admitted until crew.json is fixed")
	assert.Contains(t, text.Stdout, "waiter")

	plain := e.run("start", "plain", "--", "true")
	assert.Equal(t, 125, plain.Code)
	assert.Equal(t, "crew: "+problem+"; fix it, or rewrite it with `crew init --max N` (which moves this file aside)\n", plain.Stderr)

	fix := e.run("init", "--max", "3", "--pool", "test=2")
	require.Equal(t, 0, fix.Code, fix.Stderr)
	m := regexp.MustCompile(`crew: ` + regexp.QuoteMeta(cfg) + ` was unusable \(` + regexp.QuoteMeta(problem) + `\); moved it to (\S+)\. ` +
		`Nothing in it was carried over: compare the two, and set its pools again with ` + "`crew init --pool NAME=N`").FindStringSubmatch(fix.Stderr)
	require.NotNil(t, m, "init says where the broken file went: %s", fix.Stderr)
	assert.Equal(t, cfg+".broken-", m[1][:len(cfg)+8])
	kept, err := os.ReadFile(m[1])
	require.NoError(t, err)
	assert.Equal(t, brokenConfig, string(kept), "the broken file, pools and all, is kept")

	r := waiter.wait(t, 15*time.Second)
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "succeeded", e.finishedRun("waiter").State)
}

// On a terminal, the waiter's one line shows the problem too.
func TestBrokenConfigOnTheWaitLineOfATerminal(t *testing.T) {
	needScript(t)
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	cfg := breakConfig(t, e)
	type shown struct {
		out string
		err error
	}
	done := make(chan shown, 1)
	go func() {
		out, err := e.tryOnTTY(func(io.Writer, func() string) {}, "start", "--wait", "waiter", "--", "true")
		done <- shown{out, err}
	}()
	eventually(t, 15*time.Second, "the waiter to line up", func() bool { return len(e.configStatus().Queue) == 1 })
	require.Equal(t, 0, e.run("init", "--max", "1").Code)
	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	got := <-done // bounded by tryOnTTY
	require.NoError(t, got.err)
	assert.Contains(t, got.out, "\x1b[Kcrew: waiter: waiting, 1st in line, for crew.json to be fixed (retrying): "+cfg+":5:1: malformed JSON")
	assert.Contains(t, got.out, "crew: waiter: admitted as run ")
}

// Issue 23, item 13b and c: `"maximumInProgress": null` was reported as
// "maximumInProgress is 0", and a key given twice (at any depth) was
// taken as its last value. Both are refused, exit 125, with PATH:LINE:COL
// and what belongs there; status shows the same problem.
func TestConfigNullsAndDuplicateKeysAreRefused(t *testing.T) {
	cases := []struct {
		name, config string
		line, col    int
		problem      string
	}{
		{"null cap", "{\n  \"version\": 1,\n  \"maximumInProgress\": null\n}\n", 3, 24,
			`malformed config: "maximumInProgress" is null; it must be the number of slots, a whole number of at least 1`},
		{"duplicate cap", "{\n  \"version\": 1,\n  \"maximumInProgress\": 1,\n  \"maximumInProgress\": 8\n}\n", 4, 3,
			`malformed config: "maximumInProgress" is given twice (first at 3:3); keep one`},
		{"duplicate pool", "{\n  \"version\": 1,\n  \"maximumInProgress\": 4,\n  \"pools\": {\"deploy\": 1, \"test\": 2, \"deploy\": 3}\n}\n", 4, 37,
			`malformed config: "deploy" in "pools" is given twice (first at 4:13); keep one`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.initMax(2)
			cfg := filepath.Join(e.root, "crew.json")
			require.NoError(t, os.WriteFile(cfg, []byte(c.config), 0o600))
			problem := fmt.Sprintf("%s:%d:%d: %s", cfg, c.line, c.col, c.problem)

			r := e.run("start", "t", "--", "true")
			assert.Equal(t, 125, r.Code, r.Stderr)
			assert.Equal(t, "crew: "+problem+"; fix it, or rewrite it with `crew init --max N` (which moves this file aside)\n", r.Stderr)
			s := e.configStatus()
			require.NotNil(t, s.ConfigError)
			assert.Equal(t, [2]int{c.line, c.col}, [2]int{s.ConfigError.Line, s.ConfigError.Column})
			assert.Contains(t, s.ConfigError.Error, problem)
			assert.Empty(t, e.status().Finished, "nothing ran")
		})
	}
}
