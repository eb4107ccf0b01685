//go:build linux

package e2e

// Ctrl-C stops the calling script (issue 24, item 1): a run that ended
// because of SIGINT or SIGQUIT, typed at the terminal or sent to crew, is
// recorded as before, and then crew dies by that signal, as coreutils
// timeout and well-behaved shell children do, instead of exiting 130: the
// shell that ran it (which waits for a child killed by SIGINT, in the
// WCE convention) stops too.

import (
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

// deathSignal is the signal that killed a process the test waited for,
// or 0 if it exited.
func deathSignal(t *testing.T, ps *os.ProcessState) syscall.Signal {
	t.Helper()
	require.NotNil(t, ps, "the process was waited for")
	ws, ok := ps.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	if !ws.Signaled() {
		return 0
	}
	return ws.Signal()
}

// script writes a bash script that runs crew (as $CREW) and returns the
// command that runs it, on a terminal of its own.
func (e *env) script(t *testing.T, body string) *exec.Cmd {
	t.Helper()
	path := filepath.Join(e.dir, "script.bash")
	require.NoError(t, os.WriteFile(path, []byte("ulimit -c 0\n"+body), 0o600))
	cmd := exec.Command("bash", path)
	cmd.Env, cmd.Dir = e.environ("CREW="+e.bin), e.dir
	return cmd
}

// TestCtrlCStopsTheCallingScript: Ctrl-C typed while crew runs its
// command ends the script that ran crew, whether the command has a
// pseudo-terminal of its own or owns crew's terminal (--no-pty): the line
// after crew start never runs, and bash dies by SIGINT.
func TestCtrlCStopsTheCallingScript(t *testing.T) {
	for _, flags := range []string{"", "--no-pty"} {
		t.Run("flags "+flags, func(t *testing.T) {
			e := newEnv(t)
			sh := e.script(t, `"$CREW" start `+flags+` a -- sh -c 'echo ready; exec sleep 30'
echo next
`)
			term := e.onTerminal(t, sh, 0)
			term.expect(t, "ready")
			term.typeIn(t, "\x03")
			_, out := term.exit(t)
			assert.Equal(t, syscall.SIGINT, deathSignal(t, sh.ProcessState), "bash died by the signal:\n%s", out)
			assert.NotContains(t, out, "next", "the script went no further")
			rec := e.finishedRun("a")
			assert.Equal(t, "stopped", rec.State)
			assert.Equal(t, "SIGINT", rec.Signal)
			assert.Contains(t, rec.Reason, "interrupted from the terminal (SIGINT)")
		})
	}
}

// TestCtrlBackslashKillsCrewByQuit: Ctrl-\ typed while crew runs its
// command kills crew by SIGQUIT, as it would have killed the command run
// without crew: bash reports "Quit" for it (and goes on, as bash always
// does after a SIGQUIT, which it ignores), where it reported nothing for
// crew's exit 131.
func TestCtrlBackslashKillsCrewByQuit(t *testing.T) {
	e := newEnv(t)
	sh := e.script(t, `"$CREW" start a -- sh -c 'echo ready; exec sleep 30'
echo "status=$?"
`)
	term := e.onTerminal(t, sh, 0)
	term.expect(t, "ready")
	term.typeIn(t, "\x1c")
	_, out := term.exit(t)
	assert.Regexp(t, `line 2: +\d+ Quit +"\$CREW" start a`, out, "bash saw crew killed by SIGQUIT")
	assert.Contains(t, out, "status=131")
	rec := e.finishedRun("a")
	assert.Equal(t, "stopped", rec.State)
	assert.Equal(t, "SIGQUIT", rec.Signal)
	assert.Contains(t, rec.Reason, "interrupted from the terminal (SIGQUIT)")
}

// TestCtrlCEndsALoopOnce: one Ctrl-C ends a loop of crew starts, not one
// iteration.
func TestCtrlCEndsALoopOnce(t *testing.T) {
	e := newEnv(t)
	sh := e.script(t, `for i in 1 2 3; do
  "$CREW" start t$i -- sh -c "echo ready\$0; exec sleep 30" $i
  echo after$i
done
echo done
`)
	term := e.onTerminal(t, sh, 0)
	term.expect(t, "ready1")
	term.typeIn(t, "\x03")
	_, out := term.exit(t)
	assert.Equal(t, syscall.SIGINT, deathSignal(t, sh.ProcessState), out)
	assert.NotContains(t, out, "after1")
	assert.NotContains(t, out, "ready2")
	assert.NotContains(t, out, "done")
	assert.Empty(t, e.status("t2").Finished, "the loop started nothing more")
}

// TestCtrlCInLineStopsTheScript: Ctrl-C while crew start --wait waits in
// line (the terminal signals crew and the script alike) leaves the line,
// starts nothing, and ends the script: crew dies by SIGINT, so bash does
// not take it for a child that handled the signal.
func TestCtrlCInLineStopsTheScript(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	defer func() { release(); holder.wait(t, 10*time.Second) }()
	marker := filepath.Join(e.dir, "ran")
	sh := e.script(t, `"$CREW" start --wait waiter -- touch "$1"
echo next
`)
	sh.Args = append(sh.Args, marker)
	term := e.onTerminal(t, sh, 0)
	e.waitQueued("waiter")
	term.typeIn(t, "\x03")
	_, out := term.exit(t)
	assert.Equal(t, syscall.SIGINT, deathSignal(t, sh.ProcessState), out)
	assert.NotContains(t, out, "next")
	assert.Contains(t, out, "crew: waiter: received SIGINT while waiting for admission; nothing was started")
	assert.NoFileExists(t, marker)
}

// TestInterruptSentToCrew: SIGINT or SIGQUIT sent to crew (not typed) is
// forwarded and recorded as before, and crew then dies by it; SIGTERM and
// SIGHUP keep their exit codes, 128+N. The same in the queue.
func TestInterruptSentToCrew(t *testing.T) {
	for _, c := range []struct {
		sig  syscall.Signal
		dies bool
	}{
		{syscall.SIGINT, true}, {syscall.SIGQUIT, true}, {syscall.SIGTERM, false}, {syscall.SIGHUP, false},
	} {
		t.Run(c.sig.String(), func(t *testing.T) {
			e := newEnv(t)
			p := e.start(nil, "start", "sleeper", "--", "sleep", "30")
			run := e.activeRun("sleeper")
			e.killRunAtCleanup(run)
			require.NoError(t, p.cmd.Process.Signal(c.sig)) // our own child
			r := p.wait(t, 10*time.Second)
			assert.Equal(t, 128+int(c.sig), r.Code, r.Stderr)
			if c.dies {
				assert.Equal(t, c.sig, deathSignal(t, p.cmd.ProcessState), "crew died by %s", c.sig)
			} else {
				assert.Zero(t, deathSignal(t, p.cmd.ProcessState), "crew exited %d", 128+int(c.sig))
			}
			rec := e.runRecord(run.RunID)
			assert.Equal(t, "stopped", rec.State)
			assert.Contains(t, rec.Reason, "crew received "+signalName(c.sig))

			// A start waiting in line.
			e.initMax(1)
			release, holder := e.holdSlot("holder")
			defer func() { release(); holder.wait(t, 10*time.Second) }()
			w := e.start(nil, "start", "--wait", "waiter", "--", "true")
			e.waitQueued("waiter")
			require.NoError(t, w.cmd.Process.Signal(c.sig))
			r = w.wait(t, 10*time.Second)
			assert.Equal(t, 128+int(c.sig), r.Code, r.Stderr)
			assert.Equal(t, c.dies, deathSignal(t, w.cmd.ProcessState) == c.sig, "in line: crew died by %s: %v", c.sig, c.dies)
			assert.Contains(t, r.Stderr, "received "+signalName(c.sig)+" while waiting for admission; nothing was started")
		})
	}
}

// TestInterruptDuringDetachHandover: SIGINT while crew start --detach
// hands its run over leaves the run running, detached as asked; crew
// still prints its id, says so, and dies by SIGINT, so that the script
// that was interrupted stops.
func TestInterruptDuringDetachHandover(t *testing.T) {
	e := newEnv(t)
	gate, openGate := e.gate("handover")
	cmdGate, openCmd := e.gate("command")
	p := e.start([]string{"CREW_FAILPOINT=detach-handover:wait:" + gate}, append([]string{"start", "--detach", "bg", "--"}, waitCmd(cmdGate)...)...)
	eventually(t, 10*time.Second, "the handover", func() bool { return exists(gate + ".reached") })
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	openGate()
	r := p.wait(t, 10*time.Second)
	assert.Equal(t, syscall.SIGINT, deathSignal(t, p.cmd.ProcessState), r.Stderr)
	id := strings.TrimSpace(r.Stdout)
	require.True(t, strings.HasPrefix(id, "r-"), "the run id: %q", r.Stdout)
	assert.Contains(t, r.Stderr, "crew: bg: received SIGINT; run "+id+" goes on, detached (`crew stop "+id+"` ends it)")
	assert.Equal(t, "running", e.runRecord(id).State)
	openCmd()
	assert.Equal(t, 0, e.run("wait", id).Code)
}
