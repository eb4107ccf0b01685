package e2e

// Issue 10, item 12: running out of a resource is crew's failure (exit
// 125, a message that says what to raise), never the command's, and never
// a runtime crash.

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withOpenFiles runs crew under `ulimit -n n` (soft and hard: Go raises
// the soft limit to the hard one by itself).
func (e *env) withOpenFiles(n int, args ...string) result {
	e.t.Helper()
	r, err := e.tryWithOpenFiles(n, args...)
	require.NoError(e.t, err)
	return r
}

// tryWithOpenFiles is withOpenFiles for any goroutine.
func (e *env) tryWithOpenFiles(n int, args ...string) (result, error) {
	cmd := exec.Command("sh", append([]string{"-c", `ulimit -n "$1" && shift && exec "$@"`, "sh", fmt.Sprint(n), e.bin}, args...)...)
	cmd.Env = e.environ()
	cmd.Dir = e.dir
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill() // our own child
		<-done
		return result{}, fmt.Errorf("crew %v under ulimit -n %d did not exit within 30s; stderr: %s", args, n, errb.String())
	}
	return result{Stdout: out.String(), Stderr: errb.String(), Code: cmd.ProcessState.ExitCode()}, nil
}

var needsRE = regexp.MustCompile(`crew needs at least (\d+): raise the limit with ` + "`ulimit -n (\\d+)`")

// With `ulimit -n 6` crew used to die in the Go runtime ("fatal error:
// runtime: netpollinit failed", exit 2) or fail somewhere in the state
// root. It refuses up front instead, naming the limit to set; at exactly
// that limit its hungriest paths work, one below it refuses.
func TestTooFewFileDescriptors(t *testing.T) {
	e := newEnv(t)
	r := e.withOpenFiles(6, "start", "t", "--", "true")
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: this process may open only 6 files (ulimit -n), but crew needs at least ")
	assert.NotContains(t, r.Stderr, "fatal error")
	m := needsRE.FindStringSubmatch(r.Stderr)
	require.NotNil(t, m, "the message names the limit to set: %q", r.Stderr)
	need, _ := strconv.Atoi(m[1])
	require.Equal(t, m[1], m[2])
	assert.NoDirExists(t, e.root, "nothing was created")

	below := e.withOpenFiles(need-1, "status")
	assert.Equal(t, 125, below.Code, below.Stderr)
	assert.Contains(t, below.Stderr, fmt.Sprintf("may open only %d files", need-1))

	// At the limit: a start, a detached start, and a start that waits in
	// line behind a running one, with the queue's bell and locks.
	r = e.withOpenFiles(need, "start", "plain", "--", "true")
	require.Equal(t, 0, r.Code, "crew start at ulimit -n %d: %s", need, r.Stderr)
	r = e.withOpenFiles(need, "start", "--detach", "detached", "--", "true")
	require.Equal(t, 0, r.Code, "crew start --detach at ulimit -n %d: %s", need, r.Stderr)
	require.Equal(t, 0, e.run("wait", "detached").Code)
	e.initMax(1)
	gate, openGate := e.gate("holder")
	holder := e.start(nil, append([]string{"start", "holder", "--"}, waitCmd(gate)...)...)
	e.activeRun("holder")
	type waited struct {
		r   result
		err error
	}
	done := make(chan waited, 1)
	go func() {
		r, err := e.tryWithOpenFiles(need, "start", "--wait", "waiter", "--", "true")
		done <- waited{r, err}
	}()
	eventually(t, 10*time.Second, "the waiter to be in line", func() bool { return len(e.queue().Queue) == 1 })
	openGate()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	w := <-done // bounded by tryWithOpenFiles
	require.NoError(t, w.err)
	require.Equal(t, 0, w.r.Code, "crew start --wait at ulimit -n %d: %s", need, w.r.Stderr)
	assert.Equal(t, "succeeded", e.finishedRun("waiter").State)
}

// fork/exec failing for want of crew's own resources (EMFILE, ENFILE,
// EAGAIN, ENOMEM) used to exit 126 and record the command as "not
// executable". It is crew's failure: exit 125, recorded failed with
// "crew internal error: ...", and the message says what ran out.
func TestForkExecOutOfResourcesIsCrewsFailure(t *testing.T) {
	cases := []struct{ errno, text, hint string }{
		{"EMFILE", "too many open files", "crew ran out of file descriptors; raise the limit with `ulimit -n`"},
		{"ENFILE", "too many open files in system", "the system's table of open files is full"},
		{"EAGAIN", "resource temporarily unavailable", "too many processes (see `ulimit -u`)"},
		{"ENOMEM", "cannot allocate memory", "out of memory"},
	}
	for _, c := range cases {
		t.Run(c.errno, func(t *testing.T) {
			e := newEnv(t)
			marker := e.dir + "/ran"
			r := e.runEnv([]string{"CREW_FAILPOINT=fork-exec:error:" + c.errno}, "start", "t", "--", "touch", marker)
			assert.Equal(t, 125, r.Code, r.Stderr)
			assert.Contains(t, r.Stderr, "crew: t: crew internal error in run r-")
			assert.Contains(t, r.Stderr, "cannot start the command: fork/exec ")
			assert.Contains(t, r.Stderr, c.text+" ("+c.hint)
			assert.NotContains(t, r.Stderr, "not executable")
			assert.NoFileExists(t, marker)
			rec := e.finishedRun("t")
			assert.Equal(t, "failed", rec.State)
			assert.Regexp(t, `^crew internal error: cannot start the command: fork/exec \S+/touch: `+regexp.QuoteMeta(c.text), rec.Reason)
			require.NotNil(t, rec.ExitCode)
			assert.Equal(t, 125, *rec.ExitCode)
		})
	}
}
