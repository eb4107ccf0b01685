package e2e

// Issue 10, item 9: a broken pipe never makes crew lose what it knows.
// crew's stdout or stderr going away (`crew start ... | head -1`) must not
// kill crew, must not disturb the command, and must not cost the log or
// the record.

import (
	"bufio"
	"errors"
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

// exitOf waits for a crew process the test started itself and returns its
// exit code (128+N if signal N killed it). On timeout it kills it (its own
// child, through os.Process) and fails the test.
func exitOf(t *testing.T, cmd *exec.Cmd, timeout time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("crew %v did not exit within %s", cmd.Args[1:], timeout)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		require.NoError(t, err)
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// finishedRun is the task's one finished run.
func (e *env) finishedRun(task string) runJSON {
	e.t.Helper()
	s := e.status(task)
	require.Len(e.t, s.Finished, 1, "finished runs of %s", task)
	return s.Finished[0]
}

func readLog(t *testing.T, r runJSON) string {
	t.Helper()
	require.NotEmpty(t, r.LogPath, "run %s has a log", r.RunID)
	b, err := os.ReadFile(r.LogPath)
	require.NoError(t, err)
	return string(b)
}

// `crew start t -- CMD | head -1`: the reader goes away after the first
// line while the command goes on writing (more than a pipe buffer). crew
// used to die of SIGPIPE (exit 141) and leave the run "running".
func TestClosedStdoutKeepsTheRun(t *testing.T) {
	e := newEnv(t)
	gate, openGate := e.gate("reader-gone")
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	cmd := e.command(nil, "start", "piped", "--", "sh", "-c",
		`echo first; while [ ! -e "$1" ]; do sleep 0.01; done; seq 1 20000; echo last; exit 7`, "cmd", gate)
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = pw, &stderr
	require.NoError(t, cmd.Start())
	pw.Close()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "first\n", line)
	pr.Close() // like head -1: every later write of crew's gets EPIPE
	openGate()

	assert.Equal(t, 7, exitOf(t, cmd, 20*time.Second), "crew exits with the command's code: %s", stderr.String())
	r := e.finishedRun("piped")
	assert.Equal(t, "failed", r.State)
	require.NotNil(t, r.ExitCode)
	assert.Equal(t, 7, *r.ExitCode, "the command was not disturbed (141 would be SIGPIPE)")
	log := readLog(t, r)
	assert.True(t, strings.HasPrefix(log, "first\n1\n2\n"), "log starts %q", log[:min(len(log), 20)])
	assert.True(t, strings.HasSuffix(log, "\n20000\nlast\n"), "the log has everything the command wrote")
	assert.Contains(t, stderr.String(), ": warning: run "+r.RunID+": crew's stdout failed (write /dev/stdout: broken pipe); the command's output went on into the log "+r.LogPath)
}

// Both of crew's streams closed before it writes anything: neither the
// command's output nor crew's own warnings may kill or fail it.
func TestClosedStdoutAndStderr(t *testing.T) {
	e := newEnv(t)
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	pr.Close()
	cmd := e.command(nil, "start", "deaf", "--", "sh", "-c", `echo out; echo err >&2; exit 3`)
	cmd.Stdout, cmd.Stderr = pw, pw
	require.NoError(t, cmd.Start())
	pw.Close()
	assert.Equal(t, 3, exitOf(t, cmd, 20*time.Second))
	r := e.finishedRun("deaf")
	assert.Equal(t, "failed", r.State)
	require.NotNil(t, r.ExitCode)
	assert.Equal(t, 3, *r.ExitCode)
	assert.Equal(t, "command exited with status 3", r.Reason)
	log := readLog(t, r)
	assert.Contains(t, log, "out\n")
	assert.Contains(t, log, "err\n")
}

// crew's own message to a closed stderr does not change its exit code: a
// refused start still exits 75, not 141.
func TestRefusalToClosedStderr(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	gate, openGate := e.gate("holder")
	holder := e.start(nil, append([]string{"start", "holder", "--"}, waitCmd(gate)...)...)
	e.activeRun("holder")

	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	pr.Close()
	cmd := e.command(nil, "start", "late", "--", "true")
	cmd.Stderr = pw
	require.NoError(t, cmd.Start())
	pw.Close()
	assert.Equal(t, 75, exitOf(t, cmd, 20*time.Second), "refused: all slots are busy")
	openGate()
	assert.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	assert.Empty(t, e.status("late").Finished, "nothing ran")
}

// crew subscribes to SIGPIPE (so that it survives a closed stdout) but
// must not ignore it: an ignored disposition is inherited across exec, and
// `yes | head -1` inside the command would then end yes with EPIPE and
// exit 1 instead of SIGPIPE. This guards against signal.Ignore.
func TestCommandStillDiesOfSIGPIPE(t *testing.T) {
	e := newEnv(t)
	status := filepath.Join(e.dir, "yes-status")
	r := e.run("start", "yes", "--", "sh", "-c",
		`(yes; echo $? >"$1") | head -1 >/dev/null; exit "$(cat "$1")"`, "cmd", status)
	assert.Equal(t, 128+int(syscall.SIGPIPE), r.Code, "yes died of SIGPIPE: %s", r.Stderr)
	assert.NotContains(t, r.Stderr, "Broken pipe", "yes did not see EPIPE")
	rec := e.finishedRun("yes")
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 141, *rec.ExitCode)
}
