package e2e

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// onTerminalOf runs crew in a pseudo-terminal of cols columns (script(1),
// the window size set with stty) and returns what the terminal showed.
// wait, if set, runs while crew does.
func (e *env) onTerminalOf(t *testing.T, cols int, extraEnv []string, wait func(shown func() string), args ...string) string {
	t.Helper()
	needScript(t)
	quoted := []string{"'" + e.bin + "'"}
	for _, a := range args {
		quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	line := fmt.Sprintf("stty cols %d rows 24; exec %s", cols, strings.Join(quoted, " "))
	cmd := exec.CommandContext(ctx, "script", "-qec", line, "/dev/null")
	cmd.Env = e.environ(extraEnv...)
	cmd.Dir = e.dir
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	if wait != nil {
		wait(out.String)
	}
	_ = cmd.Wait()
	_ = stdin.Close()
	require.NoError(t, ctx.Err(), "crew on a terminal hung; output:\n%s", out.String())
	return out.String()
}

var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// columns is how many columns a line of terminal output takes (colour
// codes take none; every character these tests print is one column wide).
func columns(line string) int { return utf8.RuneCountInString(sgr.ReplaceAllString(line, "")) }

// terminalLines splits what a terminal showed into its lines.
func terminalLines(out string) []string {
	return strings.Split(strings.TrimRight(strings.ReplaceAll(out, "\r\n", "\n"), "\n"), "\n")
}

// crew status fits the terminal it runs on: every row of its tables within
// the terminal's width (80 columns, and 60), long task names and commands
// cut with an ellipsis, commands quoted as a shell would, coloured states
// unless NO_COLOR is set; in a pipe, whole lines (nothing cut, as ps, gh
// and git write to a pipe; or $COLUMNS if set) and no colour.
func TestStatusFitsTheTerminal(t *testing.T) {
	e := newEnv(t)
	e.initMax(3)
	longTask := "nightly-integration-tests-for-every-supported-platform"
	release, _ := e.holdSlot(longTask)
	defer release()
	gate, openGate := e.gate("second")
	defer openGate()
	p := e.start(nil, "start", "quoted", "--", "sh", "-c", `while [ ! -e "$1" ]; do sleep 0.01; done # it's a "long" one`, "wait-gate", gate)
	e.activeRun("quoted")
	require.Equal(t, 3, e.run("start", "failing", "--", "sh", "-c", "echo a long complaint about everything that went wrong >&2; exit 3").Code)

	check := func(what, out string, width int) {
		t.Helper()
		for _, l := range terminalLines(out) {
			if strings.HasPrefix(l, "State root ") {
				continue // a path, as long as it is
			}
			assert.LessOrEqual(t, columns(l), width, "%s: %q", what, l)
		}
		assert.Contains(t, out, "…", "%s: long names and commands are cut with an ellipsis", what)
		assert.Regexp(t, `\n  [0-9a-f]{8}  nigh\S*…\S*form +(\x1b\[\d+m)?running`, out, what)
		assert.Contains(t, out, "sh -c '", "%s: the command is quoted as a shell would", what)
		assert.Regexp(t, `\n  ID +TASK +STATE +FOR +PID +COMMAND`, out, what)
	}
	for _, width := range []int{80, 60} {
		out := e.onTerminalOf(t, width, nil, nil, "status")
		check(fmt.Sprintf("%d columns", width), out, width)
		assert.Contains(t, out, "\x1b[36mrunning\x1b[0m", "states are coloured on a terminal")
		assert.Contains(t, out, "\x1b[31mfailed\x1b[0m")
	}
	out := e.onTerminalOf(t, 80, []string{"NO_COLOR=1"}, nil, "status")
	check("NO_COLOR", out, 80)
	assert.NotContains(t, out, "\x1b[", "NO_COLOR: no colour")

	r := e.run("status")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.NotContains(t, r.Stdout, "…", "a pipe: nothing is cut")
	assert.Regexp(t, `\n  [0-9a-f]{8}  `+longTask+` +running`, r.Stdout, "a pipe: the whole task name")
	assert.Contains(t, r.Stdout, `'while [ ! -e "$1" ]; do sleep 0.01; done # it'\''s a "long" one' wait-gate `, "a pipe: the whole command")
	assert.NotContains(t, r.Stdout, "\x1b[", "a pipe: no colour")
	r = e.runEnv([]string{"COLUMNS=80"}, "status")
	check("a pipe with COLUMNS=80", r.Stdout, 80)
	r = e.runEnv([]string{"COLUMNS=200"}, "status")
	assert.Contains(t, r.Stdout, longTask[:9]+"…"+longTask[len(longTask)-14:], "a task is cut at 24 columns even with room, in its middle")
	assert.Contains(t, r.Stdout, `'while [ ! -e "$1" ]; do sleep 0.01; done # it'\''s a "long" one' wait-gate `, "room: the whole command")

	// JSON is never cut.
	var found bool
	for _, a := range e.status().Active {
		found = found || a.Task == longTask
	}
	assert.True(t, found)
	openGate()
	require.Equal(t, 0, p.wait(t, 10*time.Second).Code)
}

// The waiting line is redrawn in place, so it must fit the terminal: a
// line that wrapped would leave a stale line behind at every redraw. Each
// drawing of it fits, at 60 columns, with a task name longer than that.
func TestWaitLineFitsTheTerminal(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder-with-a-name-that-takes-room")
	task := "a-waiting-task-whose-name-alone-is-almost-as-long-as-the-terminal-is-wide"
	out := e.onTerminalOf(t, 60, nil, func(shown func() string) {
		e.waitQueued(task)
		eventually(t, 15*time.Second, "the waiting line to be redrawn", func() bool {
			return strings.Count(shown(), "waiting for a slot") >= 2
		})
		release()
	}, "start", "--wait", task, "--", "true")
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	draws := strings.Split(out, "\r\x1b[K")
	waiting := 0
	for _, d := range draws[1:] {
		d = strings.TrimRight(d, "\r\n")
		if strings.HasPrefix(d, "crew: ") && !strings.Contains(d, "admitted") {
			waiting++
			assert.LessOrEqual(t, columns(d), 59, "a drawing of the waiting line is wider than the terminal: %q", d)
			assert.True(t, strings.HasSuffix(d, "…"), "cut with an ellipsis: %q", d)
			assert.Contains(t, d, "…inal-is-wide: waiting for a slot: 1st in", "the task's name is cut in its middle, not what it waits for: %q", d)
		}
	}
	assert.GreaterOrEqual(t, waiting, 2, "the line was drawn and redrawn: %q", out)
	assert.Contains(t, out, "crew: "+task[:20], "the waiting line names its task")
	assert.Regexp(t, `crew: a-waiting-task\S*: admitted as run [0-9a-f]{8} after waiting `, out)
	_ = io.Discard
}

// displayWidth is how many columns a line takes on a terminal, for the
// lines these tests print: colour codes none, the emoji they use two,
// every other character one.
func displayWidth(line string) int {
	n := 0
	for _, r := range sgr.ReplaceAllString(line, "") {
		switch r {
		case '✅', '⚡':
			n += 2
		default:
			n++
		}
	}
	return n
}

// Issue 24, item 8: tables cut a long task name in the middle, keeping
// its tail, where names of one family differ; emoji take two columns, so
// the rows stay aligned; and `crew status TASK`'s last refusal, a long
// line, fits the terminal too.
func TestTablesKeepTheTailAndAlignWideCharacters(t *testing.T) {
	e := newEnv(t)
	e.initMax(4)
	tasks := []string{"integration-tests:postgres-14", "integration-tests:postgres-16", "deploy✅", "build⚡"}
	for _, task := range tasks {
		release, holder := e.holdSlot(task)
		defer func() { release(); holder.wait(t, 10*time.Second) }()
	}
	refused := e.run("start", "--pool", "", "lint", "--", "true")
	require.Equal(t, 75, refused.Code, refused.Stderr)

	out := e.onTerminalOf(t, 100, []string{"NO_COLOR=1"}, nil, "status")
	assert.Contains(t, out, "integrati…ts:postgres-14", "cut in the middle, the tail kept")
	assert.Contains(t, out, "integrati…ts:postgres-16")
	// Every row of the active table puts STATE at one column.
	var at []int
	for _, l := range terminalLines(out) {
		if i := strings.Index(l, "  running  "); i >= 0 {
			at = append(at, displayWidth(l[:i]))
		}
	}
	require.Len(t, at, len(tasks), out)
	for _, a := range at[1:] {
		assert.Equal(t, at[0], a, "rows are aligned, emoji counted as two columns:\n%s", out)
	}

	for _, width := range []int{80, 60} {
		out = e.onTerminalOf(t, width, []string{"NO_COLOR=1"}, nil, "status", "lint")
		require.Contains(t, out, "Last start refused at ")
		for _, l := range terminalLines(out) {
			if strings.HasPrefix(l, "State root ") {
				continue // a path, as long as it is
			}
			assert.LessOrEqual(t, displayWidth(l), width, "%d columns: %q", width, l)
		}
		assert.Contains(t, strings.Join(strings.Fields(out), " "), "not admitted: all slots are busy",
			"the refusal's reason is wrapped, not cut")
	}
}

// FORCE_COLOR and CLICOLOR_FORCE (set, and not "0") colour the states
// where stdout is no terminal, as a CI log that renders colours wants;
// NO_COLOR still wins (issue 24, item 9).
func TestForcedColour(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 3, e.run("start", "failing", "--", "sh", "-c", "exit 3").Code)
	for _, c := range []struct {
		env    []string
		colour bool
	}{
		{nil, false},
		{[]string{"FORCE_COLOR=1"}, true},
		{[]string{"FORCE_COLOR=true", "TERM=dumb"}, true},
		{[]string{"CLICOLOR_FORCE=1"}, true},
		{[]string{"FORCE_COLOR=0"}, false},
		{[]string{"CLICOLOR_FORCE=0"}, false},
		{[]string{"FORCE_COLOR="}, false},
		{[]string{"FORCE_COLOR=1", "NO_COLOR=1"}, false},
		{[]string{"CLICOLOR_FORCE=1", "NO_COLOR=1"}, false},
	} {
		r := e.runEnv(c.env, "status")
		require.Equal(t, 0, r.Code, r.Stderr)
		if c.colour {
			assert.Contains(t, r.Stdout, "\x1b[31mfailed\x1b[0m", "%v: coloured", c.env)
		} else {
			assert.NotContains(t, r.Stdout, "\x1b[", "%v: no colour", c.env)
		}
		h := e.runEnv(c.env, "history")
		assert.Equal(t, c.colour, strings.Contains(h.Stdout, "\x1b[31mfailed\x1b[0m"), "%v: history as status", c.env)
	}
	r := e.runEnv([]string{"FORCE_COLOR=1"}, "status", "--json")
	assert.NotContains(t, r.Stdout, "\x1b[", "JSON is never coloured")
}
