package e2e

// Issue 10, item 12: running out of a resource is crew's failure (exit
// 125, a message that says what to raise), never the command's, and never
// a runtime crash.

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
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
	return e.tryLimited(n, nil, args...)
}

// tryLimited is tryWithOpenFiles with the command adjusted by configure
// (nil: as it is) before it starts: the descriptors crew inherits
// (ExtraFiles), its stdin. This test binary, as launchLimited, sets the
// limit and then execs crew, which inherits stdin, stdout, stderr and
// ExtraFiles only, whatever descriptors the test binary inherited itself:
// the counts in crew's messages are exact.
func (e *env) tryLimited(n int, configure func(*exec.Cmd), args ...string) (result, error) {
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	cmd := exec.Command(self, append([]string{e.bin}, args...)...)
	cmd.Dir = e.dir
	if configure != nil {
		configure(cmd)
	}
	cmd.Env = append(e.environ(), fmt.Sprintf("%s=%d %d", launchLimitedEnv, n, 3+len(cmd.ExtraFiles)))
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

// launchLimitedEnv makes TestMain call launchLimited instead of running
// tests; its value is "LIMIT KEEP".
const launchLimitedEnv = "E2E_LAUNCH_LIMITED"

// launchLimited sets RLIMIT_NOFILE to limit (soft and hard), marks every
// descriptor from keep up close-on-exec (what this test binary inherited
// from whoever ran it), and execs argv with the environment less
// launchLimitedEnv. It returns only if that fails.
func launchLimited(spec string, argv []string) int {
	var limit, keep uint64
	if _, err := fmt.Sscanf(spec, "%d %d", &limit, &keep); err != nil || len(argv) == 0 {
		fmt.Fprintf(os.Stderr, "launchLimited: bad %s=%q or no command\n", launchLimitedEnv, spec)
		return 2
	}
	entries, err := os.ReadDir("/dev/fd")
	if err != nil {
		fmt.Fprintln(os.Stderr, "launchLimited:", err)
		return 2
	}
	for _, ent := range entries {
		if fd, err := strconv.Atoi(ent.Name()); err == nil && uint64(fd) >= keep {
			syscall.CloseOnExec(fd) // also the listing's own descriptor, already closed: harmless
		}
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		fmt.Fprintln(os.Stderr, "launchLimited: setrlimit:", err)
		return 2
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, launchLimitedEnv+"=") {
			env = append(env, kv)
		}
	}
	err = syscall.Exec(argv[0], argv, env)
	fmt.Fprintln(os.Stderr, "launchLimited: exec:", err)
	return 2
}

// refusalRE is crew's refusal for want of descriptors.
var refusalRE = regexp.MustCompile(`this process may open only (\d+) files \(ulimit -n\) and (\d+) are already open` +
	`(?:, (\d+) of them inherited from the process that started crew)?, but crew needs (\d+) free: ` +
	"raise the limit with `ulimit -n (\\d+)` \\(or more\\)")

// fdRefusal is a parsed refusal: the limit crew saw, how many descriptors
// were open (and how many of them inherited beyond stdin, stdout and
// stderr), how many crew needs free, and the limit it says to set.
type fdRefusal struct{ limit, open, inherited, need, set int }

func parseRefusal(t *testing.T, stderr string) fdRefusal {
	t.Helper()
	m := refusalRE.FindStringSubmatch(stderr)
	require.NotNil(t, m, "the message names the limit, what is open, what crew needs and the limit to set: %q", stderr)
	n := make([]int, len(m))
	for i := 1; i < len(m); i++ {
		n[i], _ = strconv.Atoi(m[i]) // an absent inherited count: 0
	}
	r := fdRefusal{limit: n[1], open: n[2], inherited: n[3], need: n[4], set: n[5]}
	require.Equal(t, r.open+r.need, r.set, "the limit to set leaves what crew needs free: %q", stderr)
	return r
}

// With `ulimit -n 6` crew used to die in the Go runtime ("fatal error:
// runtime: netpollinit failed", exit 2) or fail somewhere in the state
// root. It refuses up front instead, naming the limit to set; at exactly
// that limit its hungriest paths work, one below it refuses.
func TestTooFewFileDescriptors(t *testing.T) {
	e := newEnv(t)
	r := e.withOpenFiles(6, "start", "t", "--", "true")
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: this process may open only 6 files (ulimit -n) and ")
	assert.NotContains(t, r.Stderr, "fatal error")
	assert.NotContains(t, r.Stderr, "inherited", "only stdin, stdout and stderr were passed on")
	need := parseRefusal(t, r.Stderr).set
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

// Issue 23, item 9: with `ulimit -n 32` and 24 or 25 descriptors inherited
// from its parent, `crew status` passed the check of the limit and died in
// the Go runtime ("fatal error: runtime: eventfd failed", exit 2) when the
// poller was set up after crew had used what was left; other counts failed
// halfway with EMFILE. crew counts the descriptors actually free before
// anything opens one: for every count of inherited descriptors up to the
// limit, a command either works or refuses at once, exit 125, saying how
// many are open and inherited and what to do. crew as users build it
// (static): a dynamically linked crew (the race detector's) cannot even
// be loaded with no descriptor free.
func TestInheritedDescriptorsAreCounted(t *testing.T) {
	e := newEnv(t)
	e.bin = plainCrew(t)
	require.Equal(t, 0, e.run("start", "before", "--", "true").Code)
	// A limit that leaves crew what it needs and two more, with what it
	// opens on its own: crew says both when it refuses a low limit.
	r, err := e.tryWithOpenFiles(8, "status")
	require.NoError(t, err)
	limit := parseRefusal(t, r.Stderr).set + 2
	inherited := openDevNull(t, limit)
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"start", "t", "--", "true"}, {"recover"}} {
		var first *fdRefusal
		for extra := 0; extra <= limit-3; extra++ {
			r, err := e.tryLimited(limit, func(c *exec.Cmd) { c.ExtraFiles = inherited[:extra] }, args...)
			require.NoError(t, err)
			require.NotContains(t, r.Stderr, "fatal error", "crew %v with %d inherited", args, extra)
			if first == nil && r.Code == 0 {
				continue // enough free: it works
			}
			require.Equal(t, 125, r.Code, "crew %v with %d inherited under ulimit -n %d: %s", args, extra, limit, r.Stderr)
			assert.Contains(t, r.Stderr, fmt.Sprintf("crew: this process may open only %d files (ulimit -n)", limit))
			got := parseRefusal(t, r.Stderr)
			assert.Equal(t, extra, got.inherited, r.Stderr)
			assert.Contains(t, r.Stderr, "or have that process close them (or open them close-on-exec), and try again")
			assert.GreaterOrEqual(t, got.open, 3+extra, r.Stderr)
			assert.Greater(t, got.need, limit-got.open, "refused with %d free: %s", limit-got.open, r.Stderr)
			if first == nil {
				first = &got
				// The first refusal is the first count that leaves fewer
				// free than crew needs: with one fewer inherited, it
				// worked with exactly what it needs.
				assert.Equal(t, 3, extra, "crew %v refused with %d inherited: %s", args, extra, r.Stderr)
				assert.Equal(t, got.need-1, limit-got.open, r.Stderr)
				continue
			}
			assert.Equal(t, first.need, got.need, r.Stderr)
			// Open: stdin, stdout, stderr, the inherited, and what the Go
			// runtime keeps open of its own (its cgroup's CPU limit
			// files) where it found room for them.
			assert.Equal(t, min(limit, first.open-first.inherited+extra), got.open, r.Stderr)
		}
		require.NotNil(t, first, "crew %v was never refused", args)
	}
	assert.Empty(t, e.status().Active, "nothing was left active")
}

// A standard stream inherited in non-blocking mode makes package os set up
// the Go runtime's poller in its init, before main: the count must come
// before that, or with one descriptor free or none the runtime dies first.
func TestNonBlockingStdinWithNoDescriptorFree(t *testing.T) {
	e := newEnv(t)
	e.bin = plainCrew(t)
	const limit = 32
	inherited := openDevNull(t, limit)
	var p [2]int
	require.NoError(t, syscall.Pipe(p[:]))
	syscall.CloseOnExec(p[0])
	syscall.CloseOnExec(p[1])
	require.NoError(t, syscall.SetNonblock(p[0], true))
	// os.NewFile leaves a non-blocking descriptor non-blocking when it is
	// passed on.
	stdin, w := os.NewFile(uintptr(p[0]), "stdin"), os.NewFile(uintptr(p[1]), "stdin-w")
	t.Cleanup(func() { stdin.Close(); w.Close() })
	for extra := limit - 3 - 3; extra <= limit-3; extra++ {
		r, err := e.tryLimited(limit, func(c *exec.Cmd) {
			c.Stdin = stdin
			c.ExtraFiles = inherited[:extra]
		}, "status")
		require.NoError(t, err)
		assert.Equal(t, 125, r.Code, "%d inherited: %s", extra, r.Stderr)
		assert.NotContains(t, r.Stderr, "fatal error")
		assert.Contains(t, r.Stderr, fmt.Sprintf("crew: this process may open only %d files (ulimit -n)", limit))
		assert.Equal(t, extra, parseRefusal(t, r.Stderr).inherited, r.Stderr)
	}
}

// openDevNull opens n descriptors on /dev/null for crew to inherit; the
// test's cleanup closes them.
func openDevNull(t *testing.T, n int) []*os.File {
	t.Helper()
	files := make([]*os.File, n)
	for i := range files {
		f, err := os.Open(os.DevNull)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		files[i] = f
	}
	return files
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
