package e2e

// Issue 10, items 14 and 15: task names that look like run ids, names
// that spoof a terminal, and names that begin with -.

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rewriteRecord edits a crew-written record in place, as an older crew (or
// someone with write access to the root) could have written it.
func rewriteRecord(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(readRecordJSON(t, path), &m))
	edit(m)
	b, err := json.Marshal(m)
	require.NoError(t, err)
	writeRecordJSON(t, path, b)
}

// runToEnd runs task to completion and returns its id and the path of
// its finished record.
func (e *env) runToEnd(task string, cmd ...string) (id, path string) {
	e.t.Helper()
	r := e.run(append([]string{"start", "--detach", task, "--"}, cmd...)...)
	require.Equal(e.t, 0, r.Code, r.Stderr)
	id = strings.TrimSpace(r.Stdout)
	e.run("wait", id)
	// crew wait returns once the final record is durable; the detached
	// supervisor then still takes the run out of the active set. Let it
	// finish, so that a test changing the root next does not race it.
	active := filepath.Join(e.root, "runs", "active", id+".run")
	eventually(e.t, 10*time.Second, "run "+id+" leaves the active set", func() bool {
		_, err := os.Lstat(active)
		return errors.Is(err, fs.ErrNotExist)
	})
	matches, err := filepath.Glob(filepath.Join(e.root, "runs", "done", "*", id+".run"))
	require.NoError(e.t, err)
	require.Len(e.t, matches, 1)
	return id, matches[0]
}

// Item 14: a task named after another task's run id made `crew stop NAME`
// stop the other task's run. Every name that begins with r- and a digit is
// reserved now (issue 12 will accept run-id prefixes), and old records
// with such names stay readable.
func TestRunIDShapedTaskNamesAreRefused(t *testing.T) {
	e := newEnv(t)
	release, _ := e.holdSlot("victim")
	victim := e.activeRun("victim")
	for _, name := range []string{victim.RunID, "r-2026", "r-1", "r-0-backup"} {
		r := e.run("start", name, "--", "true")
		assert.Equal(t, 64, r.Code, "%s: %s", name, r.Stderr)
		assert.Contains(t, r.Stderr, `crew: invalid task name: task name "`+name+`" is reserved: names that begin with "r-" and a digit look like run ids`)
		assert.Contains(t, r.Stderr, "choose another name")
		assert.Empty(t, r.Stdout)
		r = e.run("start", "--task="+name, "--", "true")
		assert.Equal(t, 64, r.Code, "--task=%s: %s", name, r.Stderr)
	}
	for _, name := range []string{"r-build", "R-1", "run-1", "xr-1"} {
		assert.Equal(t, 0, e.run("start", name, "--", "true").Code, name)
	}
	s := e.status()
	require.Len(t, s.Active, 1, "nothing but the victim runs")
	assert.Equal(t, victim.RunID, s.Active[0].RunID)
	release()

	// A record an older crew wrote with such a name stays readable.
	id, path := e.runToEnd("legacy", "echo", "legacy output")
	rewriteRecord(t, path, func(m map[string]any) { m["task"] = "r-1legacy" })
	// A record changed behind crew's back is indexed anew by crew recover
	// (until then, the index of finished runs has it under its old task).
	require.Equal(t, 0, e.run("recover").Code)
	st := e.status("r-1legacy")
	require.Len(t, st.Finished, 1)
	assert.Equal(t, id, st.Finished[0].RunID)
	assert.Equal(t, "r-1legacy", st.Finished[0].Task)
	r := e.run("logs", "r-1legacy")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "legacy output\n", r.Stdout)
	assert.Equal(t, 0, e.run("wait", "r-1legacy").Code)
}

// Item 15: names that spoof a terminal are refused for new tasks and
// pools; what crew prints from the state root is escaped.
func TestSpoofingNamesAreRefused(t *testing.T) {
	e := newEnv(t)
	for name, task := range map[string]string{
		"right-to-left override": "build\u202egnp.exe",
		"line separator":         "a\u2028b",
		"zero width space":       "de\u200bploy",
		"no-break space":         "Deploy\u00a0Prod",
	} {
		t.Run(name, func(t *testing.T) {
			r := e.run("start", task, "--", "true")
			assert.Equal(t, 64, r.Code, r.Stderr)
			assert.Contains(t, r.Stderr, "has a character that does not print (U+")
			assert.Contains(t, r.Stderr, "it could make a terminal show something other than the name")
			assertNoRawSpoof(t, r.Stderr)
			r = e.run("init", "--pool", task+"=1")
			assert.Equal(t, 64, r.Code, r.Stderr)
			assert.Contains(t, r.Stderr, "crew: pool name ")
			assert.Contains(t, r.Stderr, "has a character that does not print (U+")
			assertNoRawSpoof(t, r.Stderr)
		})
	}
	assert.Empty(t, e.status().Finished, "no refused name ran")
}

// assertNoRawSpoof fails if out holds a character that could spoof a
// terminal: an escape, a bidirectional override, an invisible character.
func assertNoRawSpoof(t *testing.T, out string) {
	t.Helper()
	for _, r := range out {
		switch {
		case r == '\n' || r == '\t':
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			t.Errorf("raw control character %U in output:\n%s", r, out)
		case r == 0x202e || r == 0x2028 || r == 0x200b || r == 0x00a0:
			t.Errorf("raw %U in output:\n%s", r, out)
		}
	}
}

// What crew prints from the state root (task names, commands, reasons,
// hosts, file names) is escaped for the terminal, also for records written
// by an older crew or planted by hand. JSON keeps the exact bytes.
func TestPrintedRecordsAreEscaped(t *testing.T) {
	e := newEnv(t)
	const evilTask = "evil\u202ename"
	const evilReason = "\x1b[2J\x1b]0;pwned\x07cleared\u2028your screen"
	id, path := e.runToEnd("plain", "sh", "-c", "exit 3")
	rewriteRecord(t, path, func(m map[string]any) {
		m["task"] = evilTask
		m["reason"] = evilReason
		m["host"] = "host\x1b[31m"
		m["command"] = []string{"echo", "\x1b[31mred\u200b"}
		m["state"] = "interrupted"
		delete(m, "exitCode")
	})
	require.Equal(t, 0, e.run("recover").Code, "crew recover indexes the changed record")
	// A foreign file in the active set whose name is an escape sequence.
	foreign := filepath.Join(e.root, "runs", "active", "\x1b[2Jforeign\u202e.json")
	require.NoError(t, os.WriteFile(foreign, []byte("{}"), 0o600))

	for _, args := range [][]string{
		{"status"}, {"status", id}, {"status", evilTask}, {"wait", id}, {"wait", evilTask},
		{"recover", "--dry-run"}, {"stop", id}, {"logs", id},
	} {
		r := e.run(args...)
		assertNoRawSpoof(t, r.Stdout+r.Stderr)
		out := r.Stdout + r.Stderr
		switch args[0] {
		case "status":
			// (The table of all runs may cut a long name to fit 80 columns,
			// in its middle, never inside an escape.)
			assert.Regexp(t, `"evil(\\u202e|…)+name"`, out, "%v shows the name with its escape", args)
			if len(args) > 1 {
				assert.Contains(t, out, `"evil\u202ename"`, "%v shows the whole name with its escape", args)
			}
			if len(args) == 1 {
				assert.Contains(t, out, `\x1b[2Jforeign\u202e.json`, "status names the foreign file, escaped")
			}
		case "wait":
			assert.Equal(t, 125, r.Code, "%v: the run's exit status is unknown", args)
			assert.Contains(t, out, `\x1b[2J\x1b]0;pwned\a`, "%v shows the reason, escaped", args)
		case "recover":
			assert.Contains(t, out, `\x1b[2Jforeign\u202e.json`)
		}
	}
	r := e.run("status", id)
	assert.Contains(t, r.Stdout, `echo $'\x1b[31mred\u200b'`, "the command, quoted as a shell would, with escapes")
	assert.Contains(t, r.Stdout, `host\x1b[31m`)
	// JSON output carries the stored bytes; the encoder escapes controls.
	v := e.runRecord(id)
	assert.Equal(t, evilTask, v.Task)
	assert.Equal(t, evilReason, v.Reason)
}

// A task whose name begins with - can be started with --task=NAME, and
// named after -- by the other commands.
func TestTaskNamesThatBeginWithADash(t *testing.T) {
	e := newEnv(t)
	r := e.run("start", "-x", "--", "true")
	assert.Equal(t, 64, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: unknown shorthand flag: 'x' in -x (a task name that begins with - is given as --task=NAME)")

	r = e.run("start", "--task=-x", "--", "echo", "dashed")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "dashed\n", r.Stdout)
	r = e.run("start", "--task", "--nightly", "--", "true")
	require.Equal(t, 0, r.Code, r.Stderr)

	st := e.status("--", "-x")
	require.Len(t, st.Finished, 1)
	assert.Equal(t, "-x", st.Finished[0].Task)
	assert.Equal(t, "succeeded", e.runRecord(st.Finished[0].RunID).State)
	r = e.run("logs", "--", "-x")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "dashed\n", r.Stdout)
	assert.Equal(t, 0, e.run("wait", "--", "-x").Code)
	assert.Equal(t, 0, e.run("stop", "--", "-x").Code)
	assert.Len(t, e.status("--", "--nightly").Finished, 1)

	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"start", "--task=a", "b", "--", "true"}, `crew: give the task name once: with --task, or before --, not both (got --task="a" and ["b"])`},
		{[]string{"start", "--task=-x"}, `crew: missing command: give it after --, as in crew start --task="-x" -- COMMAND [ARGS...]`},
		{[]string{"start", "--task=-x", "--"}, "crew: missing command"},
		{[]string{"start", "--task=", "--", "true"}, "crew: invalid task name: task name is empty"},
	} {
		r := e.run(c.args...)
		assert.Equal(t, 64, r.Code, "%v: %s", c.args, r.Stderr)
		assert.Contains(t, r.Stderr, c.stderr, c.args)
	}
}
