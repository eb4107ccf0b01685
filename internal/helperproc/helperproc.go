// Package helperproc runs a test binary again as a helper process, for
// tests that must prove what another process sees (a flock belongs to an
// open file description: only another process is an honest witness). The
// helper prints status lines on stdout and obeys commands read from stdin;
// the test reads the lines, sends commands, and the helper is SIGKILLed and
// reaped when the test ends. Only tests import it.
package helperproc

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// LineTimeout bounds how long the test waits for a helper's status line.
const LineTimeout = 10 * time.Second

// GORACE keeps the race detector (when on) from sleeping a second at every
// helper's exit.
func GORACE() string {
	return "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")
}

// WaitEOF blocks a helper until the test closes its stdin.
func WaitEOF() { _, _ = io.Copy(io.Discard, os.Stdin) }

// Process is a running helper seen from the test.
type Process struct {
	t      testing.TB
	cmd    *exec.Cmd
	Stdin  io.WriteCloser
	lines  chan string
	stderr *syncBuffer
	wait   func() error
}

// Start runs this test binary with env (which tells it to be a helper)
// added to its environment; configure may adjust the command (ExtraFiles,
// more environment) before it starts.
func Start(t testing.TB, env []string, configure ...func(*exec.Cmd)) *Process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), GORACE()), env...)
	for _, c := range configure {
		c(cmd)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{t: t, cmd: cmd, Stdin: stdin, lines: make(chan string, 16), stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.wait = sync.OnceValue(cmd.Wait)
	// The helper is the test's own child, not waited for until here: its
	// pid cannot have been reused.
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = p.wait()
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	return p
}

// Pid is the helper's pid.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Expect waits for the helper's next status line and checks its prefix.
func (p *Process) Expect(prefix string) string {
	p.t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("helper %d exited before printing %q; stderr: %s", p.Pid(), prefix, p.stderr.String())
		}
		if !strings.HasPrefix(line, prefix) {
			p.t.Fatalf("helper %d printed %q, want %q...; stderr: %s", p.Pid(), line, prefix, p.stderr.String())
		}
		return line
	case <-time.After(LineTimeout):
		p.t.Fatalf("helper %d printed nothing within %s, want %q; stderr: %s", p.Pid(), LineTimeout, prefix, p.stderr.String())
	}
	return ""
}

// SilentFor asserts that the helper prints nothing for d.
func (p *Process) SilentFor(d time.Duration) {
	p.t.Helper()
	select {
	case line, ok := <-p.lines:
		if ok {
			p.t.Fatalf("helper %d printed %q, want silence (still blocked)", p.Pid(), line)
		}
		p.t.Fatalf("helper %d exited, want it blocked; stderr: %s", p.Pid(), p.stderr.String())
	case <-time.After(d):
	}
}

// Send writes a command line to the helper's stdin.
func (p *Process) Send(cmd string) {
	p.t.Helper()
	if _, err := io.WriteString(p.Stdin, cmd+"\n"); err != nil {
		p.t.Fatalf("write to helper %d: %v", p.Pid(), err)
	}
}

// Kill SIGKILLs the helper and reaps it: when Kill returns, the kernel has
// closed every descriptor the helper had.
func (p *Process) Kill() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatalf("kill helper %d: %v", p.Pid(), err)
	}
	_ = p.wait()
}

// Finish closes the helper's stdin and waits for it to exit cleanly.
func (p *Process) Finish() {
	p.t.Helper()
	_ = p.Stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.wait() }()
	select {
	case err := <-done:
		if err != nil {
			p.t.Fatalf("helper %d: %v; stderr: %s", p.Pid(), err, p.stderr.String())
		}
	case <-time.After(LineTimeout):
		p.t.Fatalf("helper %d did not exit after stdin closed", p.Pid())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
