//go:build linux

package e2e

// The command's pseudo-terminal (issue 12, item 1): crew runs on a
// terminal the test owns (a pseudo-terminal of its own, so that it can
// resize it, type on it and read its mode; the commands say "ready" only
// on a terminal), and the tests look at what
// the command saw, what reached the terminal and the log, and the
// terminal's mode after crew.

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// ttyCrew is crew in the foreground of a terminal the test holds.
type ttyCrew struct {
	cmd      *exec.Cmd
	term     *os.File // the terminal's master side
	out      *syncBuffer
	copied   chan struct{}
	done     chan struct{}
	code     int
	modeWas  *unix.Termios
	seenUpTo int
}

// startOnTerminal runs crew as the session leader of a new terminal of
// rows x cols, with it as stdin, stdout and stderr unless set on cmd by
// prepare (ctty is then the descriptor that is the terminal).
func (e *env) startOnTerminal(t *testing.T, prepare func(cmd *exec.Cmd) (ctty int), args ...string) *ttyCrew {
	t.Helper()
	cmd := e.command(nil, args...)
	ctty := 0
	if prepare != nil {
		ctty = prepare(cmd)
	}
	return e.onTerminal(t, cmd, ctty)
}

// onTerminal runs cmd as the session leader of a new terminal.
func (e *env) onTerminal(t *testing.T, cmd *exec.Cmd, ctty int) *ttyCrew {
	t.Helper()
	term, err := pty.StartWithAttrs(cmd, &pty.Winsize{Rows: 33, Cols: 91},
		&syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: ctty})
	require.NoError(t, err)
	c := &ttyCrew{cmd: cmd, term: term, out: &syncBuffer{}, copied: make(chan struct{}), done: make(chan struct{})}
	c.modeWas, err = unix.IoctlGetTermios(int(term.Fd()), unix.TCGETS)
	require.NoError(t, err)
	go func() {
		_, _ = io.Copy(c.out, term) // ends with EIO once crew and all it left are gone
		close(c.copied)
	}()
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			c.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				c.code = 128 + int(ws.Signal())
			}
		}
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = cmd.Process.Kill() // our own child
			<-c.done
		}
		_ = term.Close()
	})
	return c
}

// expect waits until the terminal shows want after what was seen so far.
func (c *ttyCrew) expect(t *testing.T, want string) {
	t.Helper()
	eventually(t, 20*time.Second, "the terminal to show "+want, func() bool {
		out := c.out.String()
		if i := strings.Index(out[c.seenUpTo:], want); i >= 0 {
			c.seenUpTo += i + len(want)
			return true
		}
		return false
	})
}

func (c *ttyCrew) typeIn(t *testing.T, s string) {
	t.Helper()
	_, err := io.WriteString(c.term, s)
	require.NoError(t, err)
}

// exit waits for crew's exit and its output, and checks that crew left
// the terminal in the mode it found it in.
func (c *ttyCrew) exit(t *testing.T) (code int, out string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		t.Fatalf("crew did not exit; the terminal shows:\n%s", c.out.String())
	}
	mode, err := unix.IoctlGetTermios(int(c.term.Fd()), unix.TCGETS)
	require.NoError(t, err)
	assert.Equal(t, *c.modeWas, *mode, "crew gave the terminal its mode back")
	select {
	case <-c.copied:
	case <-time.After(time.Minute):
		t.Fatal("the terminal was never closed")
	}
	return c.code, c.out.String()
}

// TestPTYCommandGetsATerminal: on a terminal the command's stdin, stdout
// and stderr are a terminal of the same size; the terminal shows its
// output, and the log keeps it with plain newlines.
func TestPTYCommandGetsATerminal(t *testing.T) {
	e := newEnv(t)
	c := e.startOnTerminal(t, nil, "start", "tty", "--", "sh", "-c",
		`for fd in 0 1 2; do test -t $fd && echo "fd$fd:tty"; done; stty size; echo out; echo err >&2`)
	code, out := c.exit(t)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "fd0:tty\r\nfd1:tty\r\nfd2:tty\r\n33 91\r\nout\r\nerr\r\n")
	r := e.run("logs", "tty")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "fd0:tty\nfd1:tty\nfd2:tty\n33 91\nout\nerr\n", r.Stdout)
	assert.Equal(t, "succeeded", e.status("tty").Finished[0].State)
}

// TestPTYFollowsTheWindowSize: resizing crew's terminal resizes the
// command's, which tells the command (SIGWINCH).
func TestPTYFollowsTheWindowSize(t *testing.T) {
	e := newEnv(t)
	c := e.startOnTerminal(t, nil, "start", "resize", "--", "sh", "-c",
		`trap 'stty size <&1; exit 0' WINCH; test -t 1 && echo ready; while :; do sleep 0.05; done`)
	c.expect(t, "ready")
	require.NoError(t, pty.Setsize(c.term, &pty.Winsize{Rows: 20, Cols: 50}))
	code, out := c.exit(t)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "20 50")
}

// TestPTYInputAndCtrlC: what is typed reaches the command (Enter as a
// terminal sends it, a carriage return); Ctrl-C reaches it through its
// terminal and ends the run as it does without a pseudo-terminal.
func TestPTYInputAndCtrlC(t *testing.T) {
	e := newEnv(t)
	c := e.startOnTerminal(t, nil, "start", "reader", "--", "sh", "-c", `test -t 1 && echo ready; read x; echo "got:$x"`)
	c.expect(t, "ready")
	c.typeIn(t, "hello\r")
	code, out := c.exit(t)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "got:hello")

	c = e.startOnTerminal(t, nil, "start", "interrupted", "--", "sh", "-c", `test -t 1 && echo ready; exec sleep 60`)
	c.expect(t, "ready")
	c.typeIn(t, "\x03")
	code, out = c.exit(t)
	assert.Equal(t, 130, code, out)
	rec := e.status("interrupted").Finished[0]
	assert.Equal(t, "stopped", rec.State)
	assert.Equal(t, "SIGINT", rec.Signal)
	assert.Contains(t, rec.Reason, "interrupted from the terminal (SIGINT)")
}

// TestPTYTypeAheadAfterCtrlC: what is typed right after the Ctrl-C that
// ends the command is left on crew's terminal for what reads it next (the
// shell), as a terminal keeps it, instead of going to the dying command.
// crew dies by the SIGINT and gives it to its job, the shell too, as the
// terminal would have: this shell traps it, and goes on to read.
func TestPTYTypeAheadAfterCtrlC(t *testing.T) {
	e := newEnv(t)
	shell := exec.Command("sh", "-c", `trap 'echo shell-interrupted' INT
"$1" start typeahead -- sh -c 'test -t 1 && echo ready; exec sleep 60'
echo "crew=$?"; read -r rest; echo "rest:$rest"`, "sh", e.bin)
	shell.Env, shell.Dir = e.environ(), e.dir
	c := e.onTerminal(t, shell, 0)
	c.expect(t, "ready")
	// Ended by a newline (Ctrl-J): what crew's terminal received while raw
	// is handed over as received, so an Enter (\r) typed ahead ends a
	// line for readline (bash) but not for sh's read.
	c.typeIn(t, "\x03echo next\n")
	c.expect(t, "shell-interrupted")
	c.expect(t, "crew=130")
	c.expect(t, "rest:echo next")
	_, _ = c.exit(t)
	assert.Contains(t, e.status("typeahead").Finished[0].Reason, "interrupted from the terminal (SIGINT)")
}

// TestPTYCrewStopAndGrace: crew stop reaches a command on its
// pseudo-terminal (its process group), and one that ignores the signal
// gets SIGKILL after --grace; crew's terminal gets its mode back.
func TestPTYCrewStopAndGrace(t *testing.T) {
	e := newEnv(t)
	c := e.startOnTerminal(t, nil, "start", "stubborn", "--", "sh", "-c",
		`trap '' TERM; test -t 1 && echo ready; while :; do sleep 0.05; done`)
	c.expect(t, "ready")
	r := e.run("stop", "--grace", "1s", "stubborn")
	require.Equal(t, 0, r.Code, r.Stderr)
	code, out := c.exit(t)
	assert.Equal(t, 128+int(syscall.SIGKILL), code, out)
	rec := e.status("stubborn").Finished[0]
	assert.Equal(t, "stopped", rec.State)
	assert.Contains(t, rec.Reason, "SIGKILL after the 1s grace period")
}

// TestPTYLaunchFailureRestoresTheTerminal: a command that cannot start
// leaves crew's terminal as it was, with the usual exit code.
func TestPTYLaunchFailureRestoresTheTerminal(t *testing.T) {
	e := newEnv(t)
	c := e.startOnTerminal(t, nil, "start", "missing", "--", "/nonexistent/command")
	code, out := c.exit(t)
	assert.Equal(t, 127, code, out)
	assert.Contains(t, out, "command not found: /nonexistent/command")
}

// TestPTYOnlyOnAnInteractiveTerminal: --no-pty, --tag, a redirected stdin
// or a redirected stdout give the command pipes, as before.
func TestPTYOnlyOnAnInteractiveTerminal(t *testing.T) {
	e := newEnv(t)
	probe := []string{"sh", "-c", `test -t 1 && echo out:tty || echo out:pipe; test -t 0 && echo in:tty || echo in:other`}
	cases := []struct {
		name    string
		flags   []string
		prepare func(cmd *exec.Cmd) int
		want    string
	}{
		{"--no-pty", []string{"--no-pty"}, nil, "out:pipe\r\nin:tty"},
		{"--tag", []string{"--tag"}, nil, "tag\tout:pipe\r\ntag\tin:tty"},
		{"stdin redirected", nil, func(cmd *exec.Cmd) int {
			null, err := os.Open(os.DevNull)
			require.NoError(t, err)
			t.Cleanup(func() { _ = null.Close() })
			cmd.Stdin = null
			return 1
		}, "out:pipe\r\nin:other"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := strings.TrimPrefix(strings.ReplaceAll(tc.name, " ", "-"), "--")
			args := append(append(append([]string{"start"}, tc.flags...), task, "--"), probe...)
			c := e.startOnTerminal(t, tc.prepare, args...)
			code, out := c.exit(t)
			require.Equal(t, 0, code, out)
			assert.Contains(t, out, strings.ReplaceAll(tc.want, "tag\t", task+"\t"))
		})
	}

	// stdout redirected: into a file.
	f, err := os.Create(e.dir + "/out")
	require.NoError(t, err)
	defer f.Close()
	c := e.startOnTerminal(t, func(cmd *exec.Cmd) int { cmd.Stdout = f; return 0 }, append([]string{"start", "piped", "--"}, probe...)...)
	code, out := c.exit(t)
	require.Equal(t, 0, code, out)
	b, err := os.ReadFile(e.dir + "/out")
	require.NoError(t, err)
	assert.Equal(t, "out:pipe\nin:tty\n", string(b))
}

// TestPTYUnavailableFallsBackToPipes: a system that gives no
// pseudo-terminal (here a failpoint) still runs the command, with pipes,
// and says why.
func TestPTYUnavailableFallsBackToPipes(t *testing.T) {
	e := newEnv(t)
	c := e.startOnTerminal(t, func(cmd *exec.Cmd) int {
		cmd.Env = append(cmd.Env, "CREW_FAILPOINT=pty-open:error:ENOSPC")
		return 0
	}, "start", "fallback", "--", "sh", "-c", `test -t 1 && echo out:tty || echo out:pipe`)
	code, out := c.exit(t)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "crew: fallback: warning: the command runs with pipes, not a terminal of its own: open a pseudo-terminal: no space left on device (--no-pty asks for pipes without this warning)")
	assert.Contains(t, out, "out:pipe")
	assert.Equal(t, "succeeded", e.status("fallback").Finished[0].State)
}

// TestPTYEachAttemptGetsATerminal: with --retries every attempt runs on a
// terminal of its own, and between and after them crew's terminal has its
// mode; --timeout stops a command on its terminal like any other.
func TestPTYEachAttemptGetsATerminal(t *testing.T) {
	e := newEnv(t)
	c := e.startOnTerminal(t, nil, "start", "--retries", "1", "--retry-delay", "0s", "flaky", "--", "sh", "-c",
		`test -t 1 && echo tty-attempt; exit 3`)
	code, out := c.exit(t)
	assert.Equal(t, 3, code, out)
	assert.Equal(t, 2, strings.Count(out, "tty-attempt"), out)

	c = e.startOnTerminal(t, nil, "start", "--timeout", "1s", "slow", "--", "sh", "-c", `test -t 1 && echo ready; exec sleep 60`)
	c.expect(t, "ready")
	code, out = c.exit(t)
	assert.Equal(t, 124, code, out)
}
