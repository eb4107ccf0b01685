package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// A burst: n callers started behind one gate (a FIFO they all block on)
// and released together, so they start within a millisecond or so of each
// other instead of trickling in as they are forked.

// gateMain is `crewbench gate READY FIFO PASSED -- PROG ARGS...`: it
// announces itself in READY, blocks opening FIFO until the harness opens
// its write end, announces in PASSED, and execs PROG. It makes 100 callers
// start within a millisecond or so of each other, instead of trickling in
// as they are forked.
func gateMain(args []string) int {
	if len(args) < 5 || args[3] != "--" {
		fmt.Fprintln(os.Stderr, "usage: crewbench gate READY FIFO PASSED -- PROG ARGS...")
		return 2
	}
	ready, fifo, passed, prog := args[0], args[1], args[2], args[4:]
	bin, err := exec.LookPath(prog[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "crewbench gate:", err)
		return 127
	}
	if err := appendByte(ready); err != nil {
		fmt.Fprintln(os.Stderr, "crewbench gate:", err)
		return 1
	}
	f, err := os.OpenFile(fifo, os.O_RDONLY, 0) // blocks until a writer opens
	if err != nil {
		fmt.Fprintln(os.Stderr, "crewbench gate:", err)
		return 1
	}
	f.Close()
	if err := appendByte(passed); err != nil {
		fmt.Fprintln(os.Stderr, "crewbench gate:", err)
		return 1
	}
	err = syscall.Exec(bin, prog, os.Environ())
	fmt.Fprintln(os.Stderr, "crewbench gate: exec:", err)
	return 127
}

func appendByte(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte{'.'}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// burstResult is one burst of concurrent callers.
type burstResult struct {
	codes    map[int]int // exit code -> count
	observed []interval
	stderr   []lineCount   // the callers' stderr lines, normalized, with counts, in order of first appearance
	makespan time.Duration // from the gate opening to the last caller's exit
	gateOpen int64         // monotonic ns
	cpu      time.Duration // user + system time of every caller and what it waited for
}

// gate is one burst's files and callers.
type gate struct {
	dir, ready, passed, fifo, errPath string
	n                                 int
	cmds                              []*exec.Cmd
}

// burst starts n callers (argv from argsFor) behind one gate, opens the
// gate once all are parked on it, and waits for every caller. obs is the
// observer file the callers' commands append to.
func (h *harness) burst(dir string, env []string, n int, obs string, argsFor func(i int) []string) (*burstResult, error) {
	g, err := h.startGate(dir, env, n, argsFor)
	if err != nil {
		return nil, err
	}
	res := &burstResult{codes: map[int]int{}}
	if !g.await(g.ready) {
		g.killAll()
		g.reap(res)
		return nil, fmt.Errorf("only %d of %d callers reached the gate within 60s: %s", fileSize(g.ready), n, g.stderrTail())
	}
	time.Sleep(20 * time.Millisecond) // let the last ones reach open(2)
	if err := g.open(res); err != nil {
		return nil, err
	}
	res.makespan = time.Duration(monoNow() - res.gateOpen)
	res.stderr = g.stderrLines()
	if res.observed, err = readObserver(obs); err != nil {
		return res, err
	}
	if res.codes[-1] > 0 {
		return res, fmt.Errorf("%d caller(s) were killed (a caller never passed the gate?): %s", res.codes[-1], g.stderrTail())
	}
	return res, nil
}

// startGate makes the gate's files and starts the n callers parked on it.
func (h *harness) startGate(dir string, env []string, n int, argsFor func(i int) []string) (*gate, error) {
	g := &gate{dir: dir, ready: dir + "/gate.ready", passed: dir + "/gate.passed", fifo: dir + "/gate.fifo", errPath: dir + "/callers.stderr", n: n}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("burst: %w", err)
	}
	if err := syscall.Mkfifo(g.fifo, 0o600); err != nil {
		return nil, fmt.Errorf("burst: mkfifo: %w", err)
	}
	errFile, err := os.OpenFile(g.errPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("burst: %w", err)
	}
	defer errFile.Close()
	for i := range n {
		args := append([]string{h.self, "gate", g.ready, g.fifo, g.passed, "--"}, argsFor(i)...)
		c := exec.Command(args[0], args[1:]...)
		c.Env, c.Stderr = env, errFile
		if err := c.Start(); err != nil {
			g.killAll()
			g.reap(&burstResult{codes: map[int]int{}})
			return nil, fmt.Errorf("burst: start caller %d: %w", i, err)
		}
		g.cmds = append(g.cmds, c)
	}
	return g, nil
}

// open opens the gate, holding its write end until every caller got
// through (so a late one cannot block forever on a gate that already
// closed), and reaps the callers.
func (g *gate) open(res *burstResult) error {
	w, err := os.OpenFile(g.fifo, os.O_WRONLY, 0)
	if err != nil {
		g.killAll()
		g.reap(res)
		return fmt.Errorf("open the gate: %w", err)
	}
	res.gateOpen = monoNow()
	if !g.await(g.passed) {
		g.killAll()
	}
	w.Close()
	g.reap(res)
	return nil
}

// await waits until all n callers appended a byte to path; false after 60 s.
func (g *gate) await(path string) bool {
	deadline := time.Now().Add(60 * time.Second)
	for fileSize(path) < int64(g.n) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

func (g *gate) killAll() {
	for _, c := range g.cmds {
		if c.ProcessState == nil {
			_ = c.Process.Kill()
		}
	}
}

func (g *gate) reap(res *burstResult) {
	for _, c := range g.cmds {
		_ = c.Wait()
		res.codes[c.ProcessState.ExitCode()]++
		res.cpu += c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}
}

func (g *gate) stderrTail() string {
	msg, _ := os.ReadFile(g.errPath)
	return tail(msg, 600)
}

// stderrLines are the callers' stderr lines, normalized and counted.
func (g *gate) stderrLines() []lineCount {
	b, err := os.ReadFile(g.errPath)
	if err != nil {
		return nil
	}
	var out []lineCount
	idx := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = addLine(out, idx, normalizeLine(line, g.dir), 1)
		}
	}
	return out
}

var (
	numberRe = regexp.MustCompile(`\d+`)
)

// normalizeLine makes messages that differ only in ids, numbers and the
// work directory comparable.
func normalizeLine(line, dir string) string {
	line = strings.ReplaceAll(line, dir, "DIR")
	line = runIDRe.ReplaceAllString(line, "RUN-ID")
	return numberRe.ReplaceAllString(line, "N")
}

// lineCount is a distinct message and how often it appeared.
type lineCount struct {
	line string
	n    int
}

func addLine(ls []lineCount, idx map[string]int, line string, n int) []lineCount {
	if i, ok := idx[line]; ok {
		ls[i].n += n
		return ls
	}
	idx[line] = len(ls)
	return append(ls, lineCount{line, n})
}
