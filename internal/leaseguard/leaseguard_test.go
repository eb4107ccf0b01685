package leaseguard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const (
	envGuard      = "LEASEGUARD_TEST_GUARD=1"
	envSupervisor = "LEASEGUARD_TEST_SUPERVISOR=1"
)

// TestMain turns the test binary into a guard (envGuard) or into a fake
// supervisor that starts a guard and a sleep in its group, prints their
// pids, and waits to be SIGKILLed (envSupervisor).
func TestMain(m *testing.M) {
	switch {
	case os.Getenv("LEASEGUARD_TEST_GUARD") == "1":
		os.Exit(Main())
	case os.Getenv("LEASEGUARD_TEST_SUPERVISOR") == "1":
		os.Exit(fakeSupervisor())
	}
	os.Exit(m.Run())
}

func gorace() string {
	return "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")
}

func guardEnv() []string { return append(os.Environ(), gorace(), envGuard) }

// fakeSupervisor: fd 3 is the write end of a pipe that only the sleep keeps
// (EOF on it tells the test the sleep is gone).
func fakeSupervisor() int {
	witness := os.NewFile(3, "witness")
	syscall.CloseOnExec(3) // the guard must not inherit it
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "LEASEGUARD_TEST_SUPERVISOR=") {
			env = append(env, e)
		}
	}
	g, err := Start(Options{Exe: os.Args[0], Env: append(env, envGuard), Deadline: Monotonic() + 20*time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sleep := exec.Command("sleep", "60")
	sleep.Stdout = witness
	sleep.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: g.Pgid()}
	if err := sleep.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	witness.Close()
	if err := g.Confirm(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%d %d\n", g.PID(), sleep.Process.Pid)
	select {}
}

// pipeFile returns a pipe whose write end is a file the guard can get as
// its stderr; read collects what was written until every writer closed.
type captured struct {
	w    *os.File
	mu   sync.Mutex
	buf  strings.Builder
	done chan struct{}
}

func capture(t *testing.T) *captured {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &captured{w: w, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer r.Close()
		b := make([]byte, 512)
		for {
			n, err := r.Read(b)
			c.mu.Lock()
			c.buf.Write(b[:n])
			c.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { w.Close() })
	return c
}

// closeAndRead closes our write end and returns all that was written once
// the guard's copy is closed too (the guard is dead).
func (c *captured) closeAndRead(t *testing.T) string {
	t.Helper()
	c.w.Close()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("stderr pipe still open 10s after the guard should have died")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func startGuard(t *testing.T, deadline time.Duration, stderr *os.File) *Guard {
	t.Helper()
	g, err := Start(Options{Exe: os.Args[0], Env: guardEnv(), Deadline: deadline, Stderr: stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Kill the group while the guard is unreaped, then reap it.
		_ = g.Signal(syscall.SIGKILL)
		<-g.done
	})
	return g
}

// member is a `sleep 60` started into the guard's group, our own child.
type member struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when reaped; then err/state are set
	err  error
	at   time.Duration // Monotonic when the reaper saw it exit
}

func startMember(t *testing.T, g *Guard) *member {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: g.Pgid()}
	if err := startWithDefaultSignals(cmd); err != nil {
		t.Fatal(err)
	}
	m := &member{cmd: cmd, done: make(chan struct{})}
	go func() {
		m.err = cmd.Wait()
		m.at = Monotonic()
		close(m.done)
	}()
	t.Cleanup(func() {
		select {
		case <-m.done:
		default:
			_ = cmd.Process.Kill() // our own unreaped child
			<-m.done
		}
	})
	if err := g.Confirm(); err != nil {
		t.Fatal(err)
	}
	return m
}

// startWithDefaultSignals starts cmd with the default disposition of the
// signals the tests send, whatever this process inherited: under nohup
// SIGHUP is ignored, in a shell's background job SIGINT and SIGQUIT are,
// and an ignored signal stays ignored across exec. A caught one does not:
// exec resets it to the default, so the test catches them while it starts
// the child.
func startWithDefaultSignals(cmd *exec.Cmd) error {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM)
	defer signal.Stop(c)
	return cmd.Start()
}

func (m *member) alive() bool {
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// waitDeath waits for the member's exit and says which signal ended it.
func (m *member) waitDeath(t *testing.T, within time.Duration) syscall.Signal {
	t.Helper()
	select {
	case <-m.done:
	case <-time.After(within):
		t.Fatalf("sleep %d still alive after %v", m.cmd.Process.Pid, within)
	}
	ws := m.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() {
		t.Fatalf("sleep exited with %v, not by a signal", m.cmd.ProcessState)
	}
	return ws.Signal()
}

func waitGuardExit(t *testing.T, g *Guard, within time.Duration) {
	t.Helper()
	select {
	case <-g.done:
	case <-time.After(within):
		t.Fatalf("guard %d still running after %v", g.PID(), within)
	}
	if g.Alive() {
		t.Fatal("Alive is true after the guard was reaped")
	}
}

func TestDeadlineKillsGroup(t *testing.T) {
	stderr := capture(t)
	t0 := Monotonic()
	g := startGuard(t, t0+300*time.Millisecond, stderr.w)
	m := startMember(t, g)
	if sig := m.waitDeath(t, 5*time.Second); sig != syscall.SIGKILL {
		t.Fatalf("sleep died of %v, want SIGKILL", sig)
	}
	if d := m.at - t0; d < 250*time.Millisecond {
		t.Fatalf("sleep killed %v after start, before the 300ms deadline's kill time", d)
	}
	waitGuardExit(t, g, 5*time.Second)
	out := stderr.closeAndRead(t)
	want := fmt.Sprintf("crew: lease guard: the supervisor (pid %d) stopped renewing the run's lease; killed the run's process group %d before the lease could expire\n", os.Getpid(), g.Pgid())
	if out != want {
		t.Fatalf("stderr = %q, want %q", out, want)
	}
	if err := g.Extend(Monotonic() + time.Second); !errors.Is(err, ErrGone) {
		t.Fatalf("Extend after the kill: %v, want ErrGone", err)
	}
	if err := g.End(); !errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "deadline passed") {
		t.Fatalf("End after the kill: %v, want ErrGone saying the deadline passed", err)
	}
}

func TestExtendKeepsAlive(t *testing.T) {
	stderr := capture(t)
	g := startGuard(t, Monotonic()+300*time.Millisecond, stderr.w)
	m := startMember(t, g)
	stop := Monotonic() + 1200*time.Millisecond
	var last time.Duration
	for Monotonic() < stop {
		last = Monotonic()
		if err := g.Extend(last + 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if !m.alive() {
			t.Fatalf("sleep died while the deadline was being extended: %v", m.err)
		}
	}
	if sig := m.waitDeath(t, 5*time.Second); sig != syscall.SIGKILL {
		t.Fatalf("sleep died of %v, want SIGKILL", sig)
	}
	if d := m.at - last; d < 250*time.Millisecond {
		t.Fatalf("sleep killed %v after the last Extend to +300ms", d)
	}
	waitGuardExit(t, g, 5*time.Second)
	if out := stderr.closeAndRead(t); !strings.Contains(out, "stopped renewing the run's lease") {
		t.Fatalf("stderr = %q", out)
	}
}

func TestSupervisorDeathKillsGroup(t *testing.T) {
	witnessR, witnessW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: this one after killOrphan's below.
	t.Cleanup(func() { witnessR.Close() })
	stderr := capture(t)
	sup := exec.Command(os.Args[0])
	sup.Env = append(os.Environ(), gorace(), envSupervisor)
	sup.ExtraFiles = []*os.File{witnessW}
	sup.Stderr = stderr.w
	stdout, err := sup.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	witnessW.Close()
	defer func() { _ = sup.Process.Kill(); _ = sup.Wait() }()

	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("fake supervisor: %v", err)
	}
	var guardPID, sleepPID int
	if _, err := fmt.Sscan(line, &guardPID, &sleepPID); err != nil {
		t.Fatalf("fake supervisor said %q: %v", line, err)
	}
	// The guard and the sleep are the fake supervisor's children, not
	// ours: we signal only the fake supervisor, and watch the sleep die
	// through the pipe only it holds.
	if err := sup.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = sup.Wait()
	witnessDone := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, witnessR); close(witnessDone) }()
	stderr.w.Close()
	open := func(c <-chan struct{}) func() bool {
		return func() bool {
			select {
			case <-c:
				return false
			default:
				return true
			}
		}
	}
	// If the mechanism is broken, the orphans must not outlive the test.
	t.Cleanup(func() {
		killOrphan(t, sleepPID, open(witnessDone))
		killOrphan(t, guardPID, open(stderr.done)) // only the guard holds it now
	})
	select {
	case <-witnessDone:
	case <-time.After(5 * time.Second):
		t.Fatalf("sleep %d still holds its stdout 5s after its supervisor died", sleepPID)
	}
	// The stderr pipe closes when the guard (which inherited it) is dead.
	out := stderr.closeAndRead(t)
	want := fmt.Sprintf("crew: lease guard: the supervisor (pid %d) exited without ending the run; killed the run's process group %d\n", sup.Process.Pid, guardPID)
	if out != want {
		t.Fatalf("stderr = %q, want %q", out, want)
	}
}

func TestEndKillsLeftovers(t *testing.T) {
	stderr := capture(t)
	g := startGuard(t, Monotonic()+time.Minute, stderr.w)
	m := startMember(t, g)
	if !g.Alive() {
		t.Fatal("guard not alive")
	}
	if err := g.End(); err != nil {
		t.Fatalf("End: %v", err)
	}
	if g.Alive() {
		t.Fatal("Alive after End")
	}
	if sig := m.waitDeath(t, 5*time.Second); sig != syscall.SIGKILL {
		t.Fatalf("sleep died of %v, want SIGKILL", sig)
	}
	if err := g.End(); err != nil {
		t.Fatalf("second End: %v", err)
	}
	if err := g.Extend(Monotonic() + time.Minute); !errors.Is(err, ErrGone) {
		t.Fatalf("Extend after End: %v", err)
	}
	if err := g.Signal(syscall.SIGTERM); !errors.Is(err, ErrGone) {
		t.Fatalf("Signal after End: %v", err)
	}
	if out := stderr.closeAndRead(t); out != "" {
		t.Fatalf("End wrote %q on stderr, want nothing", out)
	}
}

func TestGuardIgnoresGroupSignals(t *testing.T) {
	stderr := capture(t)
	g := startGuard(t, Monotonic()+time.Minute, stderr.w)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		m := startMember(t, g)
		if err := g.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if got := m.waitDeath(t, 5*time.Second); got != sig {
			t.Fatalf("sleep died of %v, want %v", got, sig)
		}
		if err := g.Confirm(); err != nil {
			t.Fatalf("guard after %v to its group: %v", sig, err)
		}
	}
	// Only the guard in the group: these would stop or kill it.
	for _, sig := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE} {
		if err := g.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if err := g.Confirm(); err != nil {
			t.Fatalf("guard after %v to its group: %v", sig, err)
		}
	}
	// Still acting on its messages: End kills a member.
	m := startMember(t, g)
	if err := g.End(); err != nil {
		t.Fatal(err)
	}
	if got := m.waitDeath(t, 5*time.Second); got != syscall.SIGKILL {
		t.Fatalf("sleep died of %v, want SIGKILL", got)
	}
	if out := stderr.closeAndRead(t); out != "" {
		t.Fatalf("stderr = %q", out)
	}
}

func TestGuardIgnoresSignalsAndEnforcesDeadline(t *testing.T) {
	stderr := capture(t)
	t0 := Monotonic()
	g := startGuard(t, t0+800*time.Millisecond, stderr.w)
	m := startMember(t, g)
	if err := g.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := m.waitDeath(t, 5*time.Second); got != syscall.SIGTERM {
		t.Fatalf("sleep died of %v, want SIGTERM", got)
	}
	if err := g.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	m = startMember(t, g)
	if got := m.waitDeath(t, 5*time.Second); got != syscall.SIGKILL {
		t.Fatalf("sleep died of %v, want SIGKILL", got)
	}
	if d := m.at - t0; d < 750*time.Millisecond {
		t.Fatalf("killed %v after start, deadline was 800ms", d)
	}
	waitGuardExit(t, g, 5*time.Second)
	if out := stderr.closeAndRead(t); !strings.Contains(out, "stopped renewing") {
		t.Fatalf("stderr = %q", out)
	}
}

func TestSmallerDeadlineIgnored(t *testing.T) {
	stderr := capture(t)
	t0 := Monotonic()
	g := startGuard(t, t0+800*time.Millisecond, stderr.w)
	m := startMember(t, g)
	if err := g.Extend(t0 + 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := g.Confirm(); err != nil { // the guard has read it
		t.Fatal(err)
	}
	time.Sleep(400*time.Millisecond - (Monotonic() - t0))
	if !m.alive() {
		t.Fatalf("sleep died %v after start: the smaller deadline moved the deadline back", m.at-t0)
	}
	if got := m.waitDeath(t, 5*time.Second); got != syscall.SIGKILL {
		t.Fatalf("sleep died of %v", got)
	}
	if d := m.at - t0; d < 750*time.Millisecond {
		t.Fatalf("killed %v after start, deadline was 800ms", d)
	}
	waitGuardExit(t, g, 5*time.Second)
}

func TestStartRejects(t *testing.T) {
	if _, err := Start(Options{Exe: os.Args[0], Env: guardEnv(), Deadline: Monotonic() - time.Second}); err == nil {
		t.Fatal("Start with a past deadline succeeded")
	}
	// Not a guard: exits without saying it is ready.
	if _, err := Start(Options{Exe: "/bin/sh", Args: []string{"-c", "exit 0"}, Deadline: Monotonic() + time.Minute}); err == nil || !strings.Contains(err.Error(), "before it was ready") {
		t.Fatalf("Start of a non-guard: %v", err)
	}
}

// A guard that does not lead its group must refuse to run and kill
// nothing. It joins the group of a sleep of ours, so a broken check kills
// only our own children.
func TestRefusesWhenNotGroupLeader(t *testing.T) {
	leader := exec.Command("sleep", "60")
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = leader.Process.Kill(); _ = leader.Wait() }()
	cmd := exec.Command(os.Args[0])
	cmd.Env = guardEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: leader.Process.Pid}
	cmd.Stdin = strings.NewReader("\x00\x00\x00\x00\x00\x00\x00\x00") // end
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "refusing to run") {
		t.Fatalf("guard outside its own group: %v, %q", err, out)
	}
	var ws unix.WaitStatus
	if pid, _ := unix.Wait4(leader.Process.Pid, &ws, unix.WNOHANG, nil); pid != 0 {
		t.Fatalf("the group's leader exited: %v", ws)
	}
}

// The guard holds only 0, 1, 2 and the Go runtime's own descriptors (all
// close-on-exec: epoll, and since Go 1.25 the cgroup CPU quota files), even
// when the supervisor has a descriptor without close-on-exec.
func TestGuardHoldsNoOtherDescriptors(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := unix.FcntlInt(w.Fd(), unix.F_SETFD, 0); err != nil { // inheritable
		t.Fatal(err)
	}
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(w.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	g := startGuard(t, Monotonic()+time.Minute, nil)
	syscall.CloseOnExec(int(w.Fd()))
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", g.PID()))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fd, _ := strconv.Atoi(e.Name())
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", g.PID(), e.Name()))
		if fd > 2 && !cloexec(t, g.PID(), e.Name()) {
			t.Errorf("guard holds fd %d -> %s without close-on-exec: inherited", fd, link)
		}
		if link == target {
			t.Errorf("guard holds the supervisor's inheritable pipe as fd %d", fd)
		}
	}
	if err := g.End(); err != nil {
		t.Fatal(err)
	}
}

// cloexec reads O_CLOEXEC from /proc/<pid>/fdinfo/<fd>'s octal flags.
func cloexec(t *testing.T, pid int, fd string) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			if err != nil {
				t.Fatal(err)
			}
			return flags&unix.O_CLOEXEC != 0
		}
	}
	t.Fatalf("no flags in fdinfo %s of %d", fd, pid)
	return false
}
