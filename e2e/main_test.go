// Package e2e drives the real crew binary as its users do: real processes,
// real state roots, real signals. It imports nothing from internal/.
package e2e

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// crewBin is built once, with failpoints compiled in; failpoints do
// nothing unless CREW_FAILPOINT is set. Under -race it is built with
// -race too. Benchmarks use plainCrew instead.
var crewBin string

// binDir holds the binaries the tests build; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	if spec := os.Getenv(launchLimitedEnv); spec != "" {
		os.Exit(launchLimited(spec, os.Args[1:]))
	}
	dir, err := os.MkdirTemp("", "crew-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	crewBin = filepath.Join(dir, "crew")
	if prebuilt := os.Getenv("CREW_E2E_BIN"); prebuilt != "" {
		// A re-run of this binary (in a pid namespace, see
		// inOwnPIDNamespace) uses the crew its parent built.
		crewBin = prebuilt
	} else if err := buildCrew(crewBin); err != nil {
		fmt.Fprintln(os.Stderr, "build crew:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildCrew builds crew with failpoints (and the race detector when the
// tests run with it) at path.
func buildCrew(path string) error {
	args := []string{"build", "-tags", "failpoints", "-o", path}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "../cmd/crew")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
}

// result is one finished crew invocation.
type result struct {
	Stdout, Stderr string
	Code           int
}

// plain is crew as users build it, made by plainCrew.
var plain struct {
	once sync.Once
	path string
	err  error
}

// plainCrew builds crew as users get it (`make build`: static, no
// failpoints tag, no race detector), once per test binary and only when
// first asked for, in binDir, which TestMain removes. Benchmarks measure
// it, and TestProductionBinaryHasNoFailpoints and TestProductionBinaryIsStatic
// check it.
func plainCrew(tb testing.TB) string {
	tb.Helper()
	plain.once.Do(func() {
		path := filepath.Join(binDir, "crew-plain")
		if out, err := exec.Command("make", "-C", "..", "build", "BIN="+path).CombinedOutput(); err != nil {
			plain.err = fmt.Errorf("make build: %v\n%s", err, out)
			return
		}
		// GOFLAGS in the environment could still have added -race or tags.
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			plain.err = err
			return
		}
		for _, st := range info.Settings {
			if (st.Key == "-race" && st.Value == "true") || (st.Key == "-tags" && st.Value != "") {
				plain.err = fmt.Errorf("%s was built with %s=%s (GOFLAGS=%q?), not as users build it", path, st.Key, st.Value, os.Getenv("GOFLAGS"))
				return
			}
		}
		plain.path = path
	})
	if plain.err != nil {
		tb.Fatal(plain.err)
	}
	return plain.path
}

// env is a test's state root and the environment crew runs with.
type env struct {
	t    *testing.T
	bin  string // the crew binary: crewBin, or plainCrew for benchmarks
	root string
	dir  string // scratch directory for gates, observer files and scripts
}

func newEnv(t *testing.T) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{t: t, bin: crewBin, root: filepath.Join(base, "state"), dir: filepath.Join(base, "scratch")}
	require.NoError(t, os.MkdirAll(e.dir, 0o700))
	// Registered right after TempDir, so it runs after every cleanup the
	// test adds (gates opened, crew processes killed) and before the
	// directory goes.
	t.Cleanup(e.stopLeftovers)
	return e
}

// stopLeftovers stops, with crew stop, every run still active in the root
// when the test ends. A crew the test's cleanup killed leaves its command
// running in its own process group (as it should: the command holds the
// slot), and a command blocked on a gate in the test's directory would
// outlive the directory, never see the gate and loop forever: this is how
// gate loops once leaked from passing tests. crew stop signals only what
// the kernel shows holding the run's owner lock.
func (e *env) stopLeftovers() {
	if _, err := os.Stat(e.root); err != nil {
		return
	}
	run := func(args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, e.bin, args...)
		cmd.Env = e.environ()
		cmd.Dir = e.dir
		return cmd.Output()
	}
	out, err := run("status", "--json")
	if err != nil {
		return // a root the test left unreadable on purpose: nothing to ask
	}
	var s statusJSON
	if json.Unmarshal(out, &s) != nil {
		return
	}
	for _, a := range s.Active {
		if !a.OwnerAlive || a.RunID == "" {
			continue
		}
		if _, err := run("stop", "--grace", "1s", a.RunID); err != nil {
			e.t.Logf("cleanup: crew stop %s (%s): %v", a.RunID, a.Task, err)
		}
	}
}

// environ is the environment for crew: the test's own, minus anything
// that could point crew elsewhere or colour its output otherwise than a
// test asks, plus extra.
func (e *env) environ(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(kv, "CREW_") || name == "NO_COLOR" || name == "FORCE_COLOR" || name == "CLICOLOR_FORCE" {
			continue
		}
		out = append(out, kv)
	}
	// The race runtime sleeps a second at exit unless told not to.
	out = append(out, "GORACE=atexit_sleep_ms=0 halt_on_error=1")
	return append(append(out, "CREW_ROOT="+e.root), extra...)
}

func (e *env) command(extraEnv []string, args ...string) *exec.Cmd {
	cmd := exec.Command(e.bin, args...)
	cmd.Env = e.environ(extraEnv...)
	cmd.Dir = e.dir
	return cmd
}

// run runs crew to completion. It fails the test if crew cannot be run at
// all, so call it only from the test's goroutine; goroutines use tryRun.
func (e *env) run(args ...string) result {
	e.t.Helper()
	return e.runEnv(nil, args...)
}

func (e *env) runEnv(extraEnv []string, args ...string) result {
	e.t.Helper()
	r, err := e.tryRunEnv(extraEnv, args...)
	require.NoError(e.t, err)
	return r
}

// tryRun runs crew to completion and never fails the test itself: err
// says why crew could not be run at all. Any goroutine may call it.
func (e *env) tryRun(args ...string) (result, error) { return e.tryRunEnv(nil, args...) }

func (e *env) tryRunEnv(extraEnv []string, args ...string) (result, error) {
	cmd := e.command(extraEnv, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		return result{}, fmt.Errorf("run crew %v: %w", args, err)
	}
	return result{Stdout: out.String(), Stderr: errb.String(), Code: code}, nil
}

// proc is a crew process running in the background.
type proc struct {
	cmd       *exec.Cmd
	out, errb *syncBuffer
	done      chan struct{}
	res       result
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start runs crew in the background; the test's cleanup kills it if it is
// still running. Call it from the test's goroutine; goroutines use
// tryStart.
func (e *env) start(extraEnv []string, args ...string) *proc {
	e.t.Helper()
	p, err := e.tryStart(extraEnv, args...)
	require.NoError(e.t, err)
	return p
}

// tryStart is start for any goroutine: it never fails the test itself.
func (e *env) tryStart(extraEnv []string, args ...string) (*proc, error) {
	return startProc(e.t, e.command(extraEnv, args...), args)
}

// startProc starts cmd (crew with args) in the background; the test's
// cleanup kills it (our own child) if it still runs. Any goroutine may
// call it.
func startProc(t *testing.T, cmd *exec.Cmd, args []string) (*proc, error) {
	p := &proc{cmd: cmd, out: &syncBuffer{}, errb: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.errb
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start crew %v: %w", args, err)
	}
	go func() {
		err := cmd.Wait()
		p.res = result{Stdout: p.out.String(), Stderr: p.errb.String()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.res.Code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.res.Code = 128 + int(ws.Signal())
			}
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			// Our own child: os.Process signals it and nobody else.
			// Continued first, in case the test stopped it.
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p, nil
}

// wait waits for the process to exit. Call it from the test's goroutine;
// goroutines use tryWait.
func (p *proc) wait(t *testing.T, timeout time.Duration) result {
	t.Helper()
	r, err := p.tryWait(timeout)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryWait is wait for any goroutine: it never fails the test itself.
func (p *proc) tryWait(timeout time.Duration) (result, error) {
	select {
	case <-p.done:
		return p.res, nil
	case <-time.After(timeout):
		return result{}, fmt.Errorf("crew %v did not exit within %s; stderr so far:\n%s", p.cmd.Args[1:], timeout, p.errb.String())
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// gate returns a path to block a failpoint or a command on, and a function
// that opens it.
func (e *env) gate(name string) (path string, open func()) {
	path = filepath.Join(e.dir, name)
	// Open every gate when the test ends, even a failed one, so that no
	// gated command outlives it.
	e.t.Cleanup(func() { _ = os.WriteFile(path, nil, 0o600) })
	return path, func() { require.NoError(e.t, os.WriteFile(path, nil, 0o600)) }
}

// waitCmd is a command that blocks until path exists.
func waitCmd(path string) []string {
	return []string{"sh", "-c", `while [ ! -e "$1" ]; do sleep 0.01; done`, "wait-gate", path}
}

// statusJSON is the part of `crew status --json` the tests read.
type statusJSON struct {
	Version           int       `json:"version"`
	Root              string    `json:"root"`
	MaximumInProgress int       `json:"maximumInProgress"`
	SlotsInUse        int       `json:"slotsInUse"`
	Active            []runJSON `json:"active"`
	Finished          []runJSON `json:"finished"`
	Problems          []struct {
		Path       string `json:"path"`
		Error      string `json:"error"`
		OwnerAlive bool   `json:"ownerAlive"`
		HoldsSlot  bool   `json:"holdsSlot"`
	} `json:"problems"`
}

type runJSON struct {
	RunID           string     `json:"runId"`
	Task            string     `json:"task"`
	State           string     `json:"state"`
	CreatedAt       time.Time  `json:"createdAt"`
	StartedAt       *time.Time `json:"startedAt"`
	FinishedAt      *time.Time `json:"finishedAt"`
	ExitCode        *int       `json:"exitCode"`
	Signal          string     `json:"signal"`
	Reason          string     `json:"reason"`
	SupervisorPID   int        `json:"supervisorPid"`
	TaskPID         int        `json:"taskPid"`
	PGID            int        `json:"pgid"`
	Forced          bool       `json:"forced"`
	OwnerAlive      bool       `json:"ownerAlive"`
	SupervisorAlive bool       `json:"supervisorAlive"`
	Orphaned        bool       `json:"orphaned"`
	HoldsSlot       bool       `json:"holdsSlot"`
	LogPath         string     `json:"logPath"`
	HolderPIDs      []int      `json:"holderPids"`
	HoldersUnknown  string     `json:"holderPidsUnknown"`
}

func (e *env) status(args ...string) statusJSON {
	e.t.Helper()
	r := e.run(append([]string{"status", "--json"}, args...)...)
	require.Equal(e.t, 0, r.Code, "crew status: %s", r.Stderr)
	var s statusJSON
	require.NoError(e.t, json.Unmarshal([]byte(r.Stdout), &s), r.Stdout)
	return s
}

func (e *env) runRecord(id string) runJSON {
	e.t.Helper()
	r := e.run("status", "--json", id)
	require.Equal(e.t, 0, r.Code, "crew status %s: %s", id, r.Stderr)
	var v runJSON
	require.NoError(e.t, json.Unmarshal([]byte(r.Stdout), &v), r.Stdout)
	return v
}

// activeRun waits until task has a running record and returns it.
func (e *env) activeRun(task string) runJSON {
	e.t.Helper()
	var found runJSON
	eventually(e.t, 10*time.Second, "task "+task+" to be running", func() bool {
		for _, r := range e.status().Active {
			if r.Task == task && r.State == "running" {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

func (e *env) initMax(n int) {
	e.t.Helper()
	r := e.run("init", "--max", fmt.Sprint(n))
	require.Equal(e.t, 0, r.Code, r.Stderr)
}

// signalName is the name crew records for a signal.
func signalName(sig syscall.Signal) string {
	return map[syscall.Signal]string{
		syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM", syscall.SIGHUP: "SIGHUP", syscall.SIGKILL: "SIGKILL", syscall.SIGQUIT: "SIGQUIT",
	}[sig]
}

// groupAlive reports whether any process of the group is alive. Zombies
// do not count: orphans are reaped by PID 1 at its own pace, which on some
// machines takes seconds.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) == syscall.ESRCH {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true // not Linux: trust kill(0)
	}
	for _, ent := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		// After "comm)": state ppid pgrp ...
		f := strings.Fields(s[i+1:])
		if len(f) >= 3 && f[2] == fmt.Sprint(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}
