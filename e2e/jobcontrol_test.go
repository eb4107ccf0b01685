package e2e

// crew as a shell job (issue 10, item 16): an interactive bash runs crew
// on a real pseudo-terminal (script(1)), and the tests press Ctrl-Z,
// type fg, Ctrl-C, and start crew in the background with &.

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shell is an interactive bash on a pseudo-terminal.
type shell struct {
	t    *testing.T
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *syncBuffer
	seen int // how much of out expect has consumed
}

func (e *env) startShell(t *testing.T) *shell {
	t.Helper()
	needScript(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is needed for an interactive shell with job control")
	}
	cmd := exec.Command("script", "-qec", "bash --norc --noprofile -i", "/dev/null")
	cmd.Env = e.environ("TERM=dumb", "HISTFILE=/dev/null")
	cmd.Dir = e.dir
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	sh := &shell{t: t, cmd: cmd, in: in, out: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = sh.out, sh.out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		// bash hangs up its jobs (and continues stopped ones) as the
		// terminal goes; script is the test's own child.
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	// A prompt the echo of the line that sets it cannot match.
	sh.send(`PS1='\060K> '` + "\n")
	sh.expect("0K> ")
	return sh
}

func (sh *shell) send(s string) {
	sh.t.Helper()
	_, err := io.WriteString(sh.in, s)
	require.NoError(sh.t, err)
}

// expect waits until the terminal shows want after what was consumed.
func (sh *shell) expect(want string) {
	sh.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out := sh.out.String()
		if i := strings.Index(out[sh.seen:], want); i >= 0 {
			sh.seen += i + len(want)
			return
		}
		if time.Now().After(deadline) {
			sh.t.Fatalf("the terminal never showed %q; it shows:\n%s", want, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// crewLine is a command line that runs crew in the shell.
func (e *env) crewLine(args string) string { return fmt.Sprintf("'%s' %s", e.bin, args) }

// ttyState is what /proc says of a process's place on its terminal.
func ttyState(pid int) (state byte, foreground bool, err error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, false, err
	}
	tpgid, err := statField(pid, 8)
	return st.state, err == nil && tpgid == st.pgrp, err
}

// awaitState waits until the process (proven ours) is in state want
// ('T' stopped, 'S'/'R' running) and, for a running one, owns the
// terminal's foreground when fg is set.
func awaitState(t *testing.T, what string, p *ownProc, want byte, fg bool) {
	t.Helper()
	eventually(t, 15*time.Second, what, func() bool {
		state, foreground, err := ttyState(p.pid)
		if err != nil {
			return false
		}
		if want == 'T' {
			return state == 'T'
		}
		return state != 'T' && state != 'Z' && (!fg || foreground)
	})
}

// TestJobControlCtrlZAndFg: Ctrl-Z stops the command and crew with it,
// so the shell gets its prompt back; fg continues both and gives the
// command the terminal again, so it reads what is typed.
func TestJobControlCtrlZAndFg(t *testing.T) {
	if !procfsProofs {
		t.Skip("needs /proc to see the processes' states")
	}
	e := newEnv(t)
	sh := e.startShell(t)
	sh.send(e.crewLine(`start zjob -- sh -c 'read x; echo got:$x'`) + "\n")
	run := e.activeRun("zjob")
	e.killRunAtCleanup(run)
	cmd := e.proveRunTask(run)
	awaitState(t, "the command to own the terminal", cmd, 'S', true)

	sh.send("\x1a") // Ctrl-Z
	sh.expect("Stopped")
	sh.send("echo back-$((40+2))\n")
	sh.expect("back-42")
	sh.expectCookedTerminal()
	awaitState(t, "the command to be stopped", cmd, 'T', false)
	assert.Equal(t, "running", e.runRecord(run.RunID).State)

	sh.send("fg\n")
	awaitState(t, "the command to run in the foreground again", cmd, 'S', true)
	sh.send("hello\n")
	sh.expect("got:hello")
	// Typed only once the shell is back: while the command runs on its
	// pseudo-terminal, what is typed is the command's (see TestTerminal*).
	sh.expect("0K> ")
	sh.send("echo rc=$?\n")
	sh.expect("rc=0")
	assert.Equal(t, "succeeded", e.runRecord(run.RunID).State)
}

// expectCookedTerminal checks that the terminal is not left raw (crew's
// pseudo-terminal mode) now that the shell has it.
func (sh *shell) expectCookedTerminal() {
	sh.t.Helper()
	sh.send("echo mode-$(stty -a | grep -c -- -icanon)x\n")
	sh.expect("mode-0x")
}

// TestJobControlSIGTSTPToCrew: a SIGTSTP sent to crew (not typed: its
// terminal is raw while its command runs on a pseudo-terminal) stops the
// job as Ctrl-Z does, with the terminal's mode given back; fg goes on.
func TestJobControlSIGTSTPToCrew(t *testing.T) {
	if !procfsProofs {
		t.Skip("needs /proc to see the processes' states")
	}
	e := newEnv(t)
	sh := e.startShell(t)
	sh.send(e.crewLine(`start tstp -- sh -c 'read x; echo got:$x'`) + "\n")
	run := e.activeRun("tstp")
	e.killRunAtCleanup(run)
	cmd := e.proveRunTask(run)
	crew, err := proveProc(run.SupervisorPID, e.crewIdentity())
	requireProof(t, err, "prove crew start")
	defer crew.release()
	awaitState(t, "the command to own its terminal", cmd, 'S', true)

	require.NoError(t, crew.signal(syscall.SIGTSTP))
	sh.expect("Stopped")
	awaitState(t, "the command to be stopped", cmd, 'T', false)
	sh.expectCookedTerminal()

	sh.send("fg\n")
	awaitState(t, "the command to run again", cmd, 'S', true)
	sh.send("hello\n")
	sh.expect("got:hello")
	sh.expect("0K> ")
	sh.send("echo rc=$?\n")
	sh.expect("rc=0")
}

// TestJobControlShellOnThePTY: with an interactive shell as the command,
// Ctrl-Z stops that shell's job (the kernel does it: the job's parent is
// in its session) and the shell goes on; crew and its run are untouched.
func TestJobControlShellOnThePTY(t *testing.T) {
	if !procfsProofs {
		t.Skip("needs /proc to see the processes' states")
	}
	e := newEnv(t)
	sh := e.startShell(t)
	sh.send(e.crewLine(`start inner -- env INNER=yes bash --norc --noprofile -i`) + "\n")
	run := e.activeRun("inner")
	e.killRunAtCleanup(run)
	sh.send("sleep 60\n")
	eventually(t, 15*time.Second, "the inner shell's job to own its terminal", func() bool {
		return foregroundChild(run.TaskPID)
	})
	sh.send("\x1a")
	sh.send("echo in-$INNER-x; kill -9 %1; disown -a; exit\n")
	sh.expect("in-yes-x")
	sh.expect("0K> ")
	sh.send("echo rc=$?\n")
	sh.expect("rc=0")
	assert.NotContains(t, sh.out.String(), "Stopped                 '", "crew's job itself never stopped")
	assert.Equal(t, "succeeded", e.runRecord(run.RunID).State)
}

// foregroundChild reports whether a child of pid (only looked at) is in
// its terminal's foreground group, other than pid's own.
func foregroundChild(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return false
	}
	own, err := readStat(pid)
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(b)) {
		var child int
		if _, err := fmt.Sscan(f, &child); err != nil {
			continue
		}
		st, err := readStat(child)
		tpgid, terr := statField(child, 8)
		if err == nil && terr == nil && st.pgrp == tpgid && st.pgrp != own.pgrp {
			return true
		}
	}
	return false
}

// TestJobControlCtrlZFgCtrlC: after Ctrl-Z and fg, Ctrl-C reaches the
// command again and the run is recorded as interrupted from the terminal.
func TestJobControlCtrlZFgCtrlC(t *testing.T) {
	if !procfsProofs {
		t.Skip("needs /proc to see the processes' states")
	}
	e := newEnv(t)
	sh := e.startShell(t)
	sh.send(e.crewLine(`start cjob -- sleep 60`) + "\n")
	run := e.activeRun("cjob")
	e.killRunAtCleanup(run)
	cmd := e.proveRunTask(run)
	awaitState(t, "the command to own the terminal", cmd, 'S', true)

	sh.send("\x1a")
	sh.expect("Stopped")
	sh.send("fg\n")
	sh.expect("0K> fg")
	awaitState(t, "the command to run in the foreground again", cmd, 'S', true)
	sh.send("\x03") // Ctrl-C
	sh.send("echo rc=$?\n")
	sh.expect("rc=130")
	rec := e.runRecord(run.RunID)
	assert.Equal(t, "stopped", rec.State)
	assert.Contains(t, rec.Reason, "interrupted from the terminal (SIGINT)")
}

// TestJobControlBackgroundThenFg: `crew start ... &` whose command reads
// the terminal stops (SIGTTIN) with crew, as a shell job does; fg gives
// the command the terminal and it reads what is typed.
func TestJobControlBackgroundThenFg(t *testing.T) {
	if !procfsProofs {
		t.Skip("needs /proc to see the processes' states")
	}
	e := newEnv(t)
	sh := e.startShell(t)
	sh.send(e.crewLine(`start bgjob -- sh -c 'read x; echo got:$x'`) + " &\n")
	run := e.activeRun("bgjob")
	e.killRunAtCleanup(run)
	cmd := e.proveRunTask(run)
	crew, err := proveProc(run.SupervisorPID, e.crewIdentity())
	requireProof(t, err, "prove crew start")
	defer crew.release()
	awaitState(t, "the command to stop on reading the terminal", cmd, 'T', false)
	awaitState(t, "crew to stop with its command", crew, 'T', false)
	sh.send("jobs\n")
	sh.expect("Stopped")

	sh.send("fg\n")
	awaitState(t, "the command to own the terminal", cmd, 'S', true)
	sh.send("hello\n")
	sh.expect("got:hello")
	sh.send("echo rc=$?\n")
	sh.expect("rc=0")
	assert.Equal(t, "succeeded", e.runRecord(run.RunID).State)
}

// statField is field k (proc(5) numbering) of /proc/<pid>/stat, k > 2.
func statField(pid, k int) (int, error) {
	st, err := readStatFields(pid)
	if err != nil {
		return 0, err
	}
	if k-3 >= len(st) {
		return 0, fmt.Errorf("/proc/%d/stat: no field %d", pid, k)
	}
	var v int
	_, err = fmt.Sscan(st[k-3], &v)
	return v, err
}

// readStatFields is /proc/<pid>/stat after "pid (comm)": field 3 first.
func readStatFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}
