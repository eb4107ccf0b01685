package e2e

// A run's command may leave processes behind (started with &, nohup or
// setsid) that keep fd 3, the run's owner lock: the slot stays theirs
// until they are gone, whatever the command's own end, and an independent
// observer (each process reports its own start and death) never sees more
// commands than slots.

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leaveBehind are shell lines that start "$@" so that it outlives the
// shell, which exits 0 once it has started (it touches $MARK).
var leaveBehind = map[string]string{
	"background":              `"$@" >/dev/null 2>&1 &`,
	"background on the pipes": `"$@" &`, // crew drains them for a while
	"nohup":                   `nohup "$@" >/dev/null 2>&1 &`,
	"setsid":                  `setsid "$@" >/dev/null 2>&1 &`,
}

// launcher is the run's command: it leaves cmd behind (how), and exits 0
// once it runs.
func (e *env) launcher(how string, cmd []string) []string {
	mark := filepath.Join(e.dir, "left-"+strings.ReplaceAll(how, " ", "-"))
	script := leaveBehind[how] + ` while [ ! -e "$MARK" ]; do sleep 0.01; done; exit 0`
	return append([]string{"env", "MARK=" + mark, "sh", "-c", script, "launcher"}, cmd...)
}

// leftover is an observed command that the launcher leaves behind: it
// marks that it runs, then waits for gate.
func (o *observer) leftover(gate string) ([]string, *obsRun) {
	return o.cmd("leftover", `touch "$MARK"; while [ ! -e "$1" ]; do sleep 0.02; done`, gate)
}

// heldBy matches what crew says of a run whose command has ended while
// processes it left hold its slot (the leftover's shell may have a child
// or two at that instant).
var heldBy = regexp.MustCompile(`command exited with status 0[,;] (but )?(1 process it left \(pid \d+\) still holds|\d+ processes it left \(pids [\d, ]+\) still hold) the (run's )?slot`)

// leftoverRun starts run A at cap 1, whose command leaves an observed
// process behind that runs until its gate opens, and returns it with the
// gate's opener.
func (e *env) leftoverRun(t *testing.T, o *observer, how string) (left *obsRun, open func()) {
	t.Helper()
	gate, open := e.gate("leftover")
	cmd, left := o.leftover(gate)
	r := e.run(append([]string{"start", "A", "--"}, e.launcher(how, cmd)...)...)
	require.Equal(t, 0, r.Code, "the command itself exits 0: %s", r.Stderr)
	assert.Regexp(t, heldBy, r.Stderr)
	left.waitStarted(t, 10*time.Second)
	return left, open
}

func TestLeftoversHoldTheSlot(t *testing.T) {
	for how := range leaveBehind {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			e.initMax(1)
			o := newObserver(t, e.dir)
			left, open := e.leftoverRun(t, o, how)

			s := e.status("A")
			require.Len(t, s.Active, 1, "A holds its slot while its leftover lives")
			assert.True(t, s.Active[0].HoldsSlot)
			assert.Equal(t, 1, e.status().SlotsInUse)
			txt := e.run("status").Stdout
			assert.Regexp(t, `A +exited `, txt, "the state column says the command has ended")
			assert.Regexp(t, `: command exited with status 0; (1 process it left still holds the slot: pid|\d+ processes it left still hold the slot: pids) `, txt)
			assert.Contains(t, txt, fmt.Sprint(left.pid), "the note names the leftover's pid: %s", txt)
			rep, _ := e.recover("--dry-run")
			require.Len(t, rep.Items, 1)
			assert.Contains(t, rep.Items[0].Reason, "command exited with status 0 at ")
			assert.Contains(t, rep.Items[0].Reason, "but processes it left still hold the slot")

			cmd, _ := o.sleeper("B", 50*time.Millisecond)
			r := e.run(append([]string{"start", "B", "--"}, cmd...)...)
			assert.Equal(t, 75, r.Code, "B must wait for A's leftover: %s", r.Stderr)

			cmd, waiter := o.sleeper("B", 50*time.Millisecond)
			w := e.start(nil, append([]string{"start", "--wait", "B", "--"}, cmd...)...)
			eventually(t, 10*time.Second, "B in line", func() bool { return len(e.queue().Queue) == 1 })
			open()
			left.waitDone(t, 10*time.Second)
			require.Equal(t, 0, w.wait(t, 10*time.Second).Code)
			waiter.waitDone(t, 10*time.Second)

			n, at := o.maxConcurrent()
			assert.Equal(t, 1, n, "commands alive at once at cap 1: %s", at)
			a := e.finishedRun("A")
			assert.Equal(t, "succeeded", a.State)
			require.NotNil(t, a.ExitCode)
			assert.Equal(t, 0, *a.ExitCode)
			assert.Contains(t, a.Reason, "the processes it left held the run's slot until they ended")
		})
	}
}

// crew stop ends what the command left, and the run is final with the
// command's own end.
func TestCrewStopEndsLeftovers(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	o := newObserver(t, e.dir)
	left, _ := e.leftoverRun(t, o, "setsid")

	r := e.run("stop", "--grace", "5s", "A")
	require.Equal(t, 0, r.Code, "%s%s", r.Stdout, r.Stderr)
	left.waitDone(t, 10*time.Second)
	assert.False(t, left.byItself, "the leftover was stopped, not left to end by itself")
	a := e.finishedRun("A")
	assert.Equal(t, "succeeded", a.State, a.Reason)
	assert.Contains(t, a.Reason, "the processes it left held the run's slot until crew stop")
	assert.Equal(t, 0, e.run("start", "B", "--", "true").Code, "the slot is free")
}

// On the command's own terminal (a pseudo-terminal crew makes), a process
// left in the background gets SIGHUP when the command's session ends, as
// on closing a terminal window; nohup and setsid keep it, and the slot
// with it. Either way, no more commands than slots are ever alive.
func TestLeftoversOnATerminal(t *testing.T) {
	for _, how := range []string{"background", "nohup", "setsid"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			e.initMax(1)
			o := newObserver(t, e.dir)
			gate, open := e.gate("leftover")
			cmd, left := o.leftover(gate)
			c := e.startOnTerminal(t, nil, append([]string{"start", "A", "--"}, e.launcher(how, cmd)...)...)
			code, out := c.exit(t)
			require.Equal(t, 0, code, out)
			left.waitStarted(t, 10*time.Second)

			bcmd, _ := o.sleeper("B", 50*time.Millisecond)
			r := e.run(append([]string{"start", "B", "--"}, bcmd...)...)
			if how == "background" {
				left.waitDone(t, 10*time.Second) // hung up
			} else {
				assert.Equal(t, 75, r.Code, "%s keeps the leftover, and the slot: %s", how, r.Stderr)
				assert.False(t, left.isDone())
			}
			open()
			left.waitDone(t, 10*time.Second)
			n, at := o.maxConcurrent()
			assert.Equal(t, 1, n, "commands alive at once at cap 1: %s", at)
		})
	}
}

// nothingLeft: a command that leaves nothing behind frees its slot at once
// (the check for leftovers takes the owner lock again; it is not a wait).
func TestNoLeftoversFreeTheSlotAtOnce(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	r := e.run("start", "A", "--", "sh", "-c", "true & wait")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.NotContains(t, r.Stderr, "it left")
	assert.Empty(t, e.status().Active)
	assert.Equal(t, "succeeded", e.finishedRun("A").State)
}

// A detached start's parent lets go of the run's locks as soon as its
// supervisor holds them: a command that ends while the parent is still on
// its way out is final at once, not taken for one that left processes
// behind (held here at the handover until the run is over).
func TestDetachedRunEndsWhileItsParentLingers(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	gate, openGate := e.gate("handover")
	parent := e.start([]string{"CREW_FAILPOINT=detach-handover:wait:" + gate}, "start", "--detach", "quick", "--", "true")
	waitReached(t, gate)
	eventually(t, 10*time.Second, "the run to be final while its parent lingers", func() bool {
		return len(e.status("quick").Finished) == 1
	})
	assert.Equal(t, "succeeded", e.finishedRun("quick").State)
	assert.Empty(t, e.status().Active)
	openGate()
	require.Equal(t, 0, parent.wait(t, 10*time.Second).Code)
}
