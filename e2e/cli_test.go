package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// statusRefusal is the lastRefusal of `crew status TASK --json`.
func (e *env) lastRefusal(task string) map[string]any {
	e.t.Helper()
	r := e.run("status", "--json", task)
	require.Equal(e.t, 0, r.Code, r.Stderr)
	var s struct {
		LastRefusal map[string]any `json:"lastRefusal"`
	}
	require.NoError(e.t, json.Unmarshal([]byte(r.Stdout), &s))
	return s.LastRefusal
}

// --refused-exit N and --quiet: a cron job can treat "already running" as
// success and say nothing, as with flock -n -E 0; a script can tell a
// refusal from the command's own 75 by choosing a code the command never
// uses. The refusal is recorded with the code crew exited with.
func TestRefusedExitAndQuiet(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("nightly")

	// The task is already running (76 by default).
	r := e.run("start", "--quiet", "--refused-exit", "0", "nightly", "--", "echo", "never")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Empty(t, r.Stdout)
	assert.Empty(t, r.Stderr, "--quiet: not a word")
	assert.EqualValues(t, 0, e.lastRefusal("nightly")["exitCode"], "recorded with the code crew exited with")

	// All slots are busy (75 by default), with a message.
	r = e.run("start", "--refused-exit", "200", "other", "--", "echo", "never")
	assert.Equal(t, 200, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: other: not admitted: all slots are busy (1/1 in use)")
	assert.EqualValues(t, 200, e.lastRefusal("other")["exitCode"])

	// Quiet without a code of its own keeps 75, silently.
	r = e.run("start", "--quiet", "other", "--", "echo", "never")
	assert.Equal(t, 75, r.Code)
	assert.Empty(t, r.Stderr)

	// A --wait=D that gives up is a refusal too; --quiet also silences
	// the waiting lines.
	r = e.run("start", "--wait=200ms", "--quiet", "--refused-exit", "3", "other", "--", "echo", "never")
	assert.Equal(t, 3, r.Code)
	assert.Empty(t, r.Stderr)

	// crew's own failures are never silenced.
	r = e.run("start", "--quiet", "--pool", "nope", "other", "--", "true")
	assert.Equal(t, 64, r.Code)
	assert.Contains(t, r.Stderr, `crew: unknown pool "nope"`)

	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	// Admitted: --refused-exit changes nothing; the command's own 75 is
	// the command's.
	r = e.run("start", "--refused-exit", "200", "own", "--", "sh", "-c", "exit 75")
	assert.Equal(t, 75, r.Code)
	assert.Empty(t, r.Stderr)
}

// --refused-exit and --quiet per reason (issue 24 item 5): 76=N and 75=N
// (running=N, busy=N) choose the code of one refusal and leave the other
// crew's own; --quiet=76 (=75) silences only that one. Values that are
// none of the forms are usage errors that list them.
func TestRefusedExitPerReason(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("nightly")

	// The task already runs (76): 76=0 and --quiet=76 apply.
	r := e.run("start", "--refused-exit", "76=0", "--quiet=76", "nightly", "--", "echo", "never")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Empty(t, r.Stdout)
	assert.Empty(t, r.Stderr, "--quiet=76: not a word about its own run")
	assert.EqualValues(t, 0, e.lastRefusal("nightly")["exitCode"])

	// The slots are busy (75): neither applies; crew's own code, aloud.
	r = e.run("start", "--refused-exit", "76=0", "--quiet=76", "backup", "--", "echo", "never")
	assert.Equal(t, 75, r.Code)
	assert.Contains(t, r.Stderr, "crew: backup: not admitted: all slots are busy (1/1 in use)")
	assert.EqualValues(t, 75, e.lastRefusal("backup")["exitCode"])

	// Both reasons, by name, with a comma or the flag twice.
	for _, args := range [][]string{{"--refused-exit", "running=0,busy=3"}, {"--refused-exit", "running=0", "--refused-exit", "busy=3"}} {
		r = e.run(append(append([]string{"start"}, args...), "backup", "--", "echo", "never")...)
		assert.Equal(t, 3, r.Code, "%v", args)
		assert.Contains(t, r.Stderr, "crew: backup: not admitted: all slots are busy", "%v", args)
		r = e.run(append(append([]string{"start"}, args...), "nightly", "--", "echo", "never")...)
		assert.Equal(t, 0, r.Code, "%v", args)
		assert.Contains(t, r.Stderr, "crew: nightly: not admitted: ", "%v: not quiet", args)
	}

	// --quiet=75 (=busy) silences the busy refusal only.
	r = e.run("start", "--quiet=busy", "backup", "--", "echo", "never")
	assert.Equal(t, 75, r.Code)
	assert.Empty(t, r.Stderr)
	r = e.run("start", "--quiet=75", "nightly", "--", "echo", "never")
	assert.Equal(t, 76, r.Code)
	assert.Contains(t, r.Stderr, "crew: nightly: not admitted: ")

	// A --wait=D that gives up is refused for its reason too.
	r = e.run("start", "--wait=200ms", "--refused-exit", "76=0", "--quiet=76", "backup", "--", "echo", "never")
	assert.Equal(t, 75, r.Code)
	assert.Contains(t, r.Stderr, "crew: backup: ")
	r = e.run("start", "--wait=200ms", "--refused-exit", "76=0", "--quiet=76", "nightly", "--", "echo", "never")
	assert.Equal(t, 0, r.Code)
	assert.NotContains(t, r.Stderr, "not admitted", "the waiting line, but not the refusal")

	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)

	forms := "give N for every refusal, or 76=N (running=N: the task already runs) or 75=N (busy=N: the slots are busy) for one, N an exit code from 0 to 255; several with commas, as in 76=0,75=3"
	for _, c := range []struct{ flag, want string }{
		{"--refused-exit=77=0", `crew: --refused-exit "77=0": "77" is not a reason crew refuses a start for; ` + forms},
		{"--refused-exit=76=x", `crew: --refused-exit "76=x": ` + forms},
		{"--refused-exit=76=256", `crew: --refused-exit "76=256": ` + forms},
		{"--refused-exit=", `crew: --refused-exit "": ` + forms},
		{"--quiet=slots", `crew: --quiet "slots": give --quiet alone (every refusal and the waiting lines), or --quiet=76 (running: the task already runs) or --quiet=75 (busy: the slots are busy) for one reason, with "="`},
	} {
		r = e.run("start", c.flag, "t", "--", "echo", "never")
		assert.Equal(t, 64, r.Code, c.flag)
		assert.Contains(t, r.Stderr, c.want, c.flag)
		assert.Empty(t, r.Stdout, c.flag)
	}
}

func TestVersion(t *testing.T) {
	e := newEnv(t)
	r := e.run("--version")
	assert.Equal(t, 0, r.Code)
	assert.Regexp(t, `^crew version \S.*\n$`, r.Stdout)
	// Set at build time: make build passes VERSION to -ldflags -X.
	bin := filepath.Join(t.TempDir(), "crew-versioned")
	out, err := exec.Command("make", "-C", "..", "build", "BIN="+bin, "VERSION=1.2.3-test").CombinedOutput()
	require.NoError(t, err, string(out))
	e.bin = bin
	r = e.run("--version")
	assert.Equal(t, "crew version 1.2.3-test\n", r.Stdout)
}

// Completion: after --, the command and then files (the shell's own
// completion: cobra's ShellCompDirectiveDefault, :0); before it, task
// names only (:4, no files).
func TestCompletionAfterDash(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 0, e.run("start", "build", "--", "true").Code)
	bin := filepath.Join(e.dir, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "crewtest-tool"), []byte("#!/bin/sh\n"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "crewtest-data"), nil, 0o600))

	r := e.runEnv([]string{"PATH=" + bin + ":" + os.Getenv("PATH")}, "__complete", "start", "build", "--", "crewtest-")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "crewtest-tool\n:0\n", r.Stdout, "executables on $PATH, then the shell's default")
	r = e.run("__complete", "start", "build", "--", "ls", "")
	assert.Equal(t, ":0\n", r.Stdout, "arguments of the command: files")
	r = e.run("__complete", "start", "--wait", "b")
	assert.Equal(t, "build\ttask, succeeded\n:4\n", r.Stdout, "before --: task names, no files")
}

// Run ids are shown short (the first 8 hex digits of their random part)
// and every command accepts them, and any unique beginning of the whole
// id; an ambiguous one is a usage error that lists the runs it fits.
func TestShortRunIDs(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for i := range 3 {
		r := e.run("start", "--detach", fmt.Sprintf("t%d", i), "--", "sh", "-c", fmt.Sprintf("echo out-%d", i))
		require.Equal(t, 0, r.Code, r.Stderr)
		ids = append(ids, strings.TrimSpace(r.Stdout))
	}
	for _, id := range ids {
		require.Equal(t, 0, e.run("wait", id).Code)
	}
	short := shortID(ids[1])
	assert.Contains(t, e.run("status").Stdout, "  "+short+"  t1  ")
	for _, arg := range []string{short, short[:4], ids[1][:len(ids[1])-10]} {
		r := e.run("logs", arg)
		assert.Equal(t, 0, r.Code, "logs %s: %s", arg, r.Stderr)
		assert.Equal(t, "out-1\n", r.Stdout, "logs %s", arg)
		var v runJSON
		r = e.run("status", "--json", arg)
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &v), "status %s: %s", arg, r.Stderr)
		assert.Equal(t, ids[1], v.RunID, "status %s", arg)
		assert.Equal(t, 0, e.run("wait", arg).Code, "wait %s", arg)
	}
	// A beginning that fits all three runs.
	common := ids[0][:2]
	for len(common) < len(ids[0]) && strings.HasPrefix(ids[1], ids[0][:len(common)+1]) && strings.HasPrefix(ids[2], ids[0][:len(common)+1]) {
		common = ids[0][:len(common)+1]
	}
	r := e.run("logs", common)
	assert.Equal(t, 64, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: "+common+" is ambiguous: it fits 3 runs:")
	for i, id := range ids {
		assert.Regexp(t, regexp.QuoteMeta(id)+`  succeeded  t`+fmt.Sprint(i), r.Stderr)
	}
	assert.Contains(t, r.Stderr, "give more of the id")
	r = e.run("status", "r-1999")
	assert.Equal(t, 64, r.Code)
	assert.Contains(t, r.Stderr, "crew: no run's id begins with r-1999 in the state root ")
	// Hex digits that are no run's are a task's name.
	r = e.run("logs", "deadbeef")
	assert.Equal(t, 64, r.Code)
	assert.Contains(t, r.Stderr, `crew: task "deadbeef" has no runs in the state root`)
}

// Flag friction: a --wait limit given as a separate word, a duration
// without its unit, --json without --detach, a pool cap above the global
// one.
func TestFlagFriction(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"start", "--wait", "10m", "build", "--", "make"}, `crew: --wait takes its limit only after "=": write --wait=10m (a separate word after --wait is read as the task name)`},
		{[]string{"start", "--grace", "5", "build", "--", "make"}, `crew: --grace "5": not a duration; give a number and a unit, as in --grace=5s (durations: 90s, 10m, 1h30m, 7d)`},
		{[]string{"init", "--max", "abc"}, `crew: --max "abc": not a whole number`},
		{[]string{"start", "--json", "build", "--", "true"}, "crew: --json goes with --detach"},
	} {
		r := e.run(c.args...)
		assert.Equal(t, 64, r.Code, "%v: %s", c.args, r.Stderr)
		assert.Contains(t, r.Stderr, c.want, "%v", c.args)
		assert.Empty(t, r.Stdout)
	}
	assert.NoDirExists(t, e.root, "no usage error touched the state root")

	r := e.run("init", "--max", "4", "--pool", "x=99")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: warning: pool x's cap 99 is above the global maximumInProgress 4: no more than 4 of its runs can be active at once")
	r = e.run("init", "--pool", "y=2")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.NotContains(t, r.Stderr, "pool y's cap")
}
