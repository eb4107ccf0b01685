package main

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// monoNow is CLOCK_MONOTONIC in nanoseconds: one clock for every process
// on the machine, immune to wall-clock steps.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Now().UnixNano()
	}
	return ts.Nano()
}

// observeMain is `crewbench observe FILE MILLISECONDS`: the command under
// test in the correctness and queue scenarios. It appends its own start
// and end (monotonic ns) to FILE, each line in one O_APPEND write, and
// sleeps in between.
func observeMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crewbench observe FILE MILLISECONDS")
		return 2
	}
	msec, err := strconv.Atoi(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "crewbench observe:", err)
		return 2
	}
	f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crewbench observe:", err)
		return 1
	}
	pid := os.Getpid()
	if _, err := fmt.Fprintf(f, "S %d %d\n", monoNow(), pid); err != nil {
		return 1
	}
	time.Sleep(time.Duration(msec) * time.Millisecond)
	if _, err := fmt.Fprintf(f, "E %d %d\n", monoNow(), pid); err != nil {
		return 1
	}
	return 0
}

// interval is one observed command: when it started and ended itself.
type interval struct{ start, end int64 }

// readObserver parses an observer file. A start without an end (a
// command killed mid-way) is counted as running until the last event.
func readObserver(path string) ([]interval, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	open := map[string]int64{}
	var out []interval
	var last int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			return nil, fmt.Errorf("%s: malformed line %q", path, sc.Text())
		}
		t, err := strconv.ParseInt(fs[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		last = max(last, t)
		switch fs[0] {
		case "S":
			open[fs[2]] = t
		case "E":
			s, ok := open[fs[2]]
			if !ok {
				return nil, fmt.Errorf("%s: end without start for %s", path, fs[2])
			}
			delete(open, fs[2])
			out = append(out, interval{s, t})
		}
	}
	for _, s := range open {
		out = append(out, interval{s, last + 1})
	}
	return out, sc.Err()
}

// maxConcurrency is the most intervals that overlap at any instant. An
// interval that ends exactly when another starts does not overlap it.
func maxConcurrency(iv []interval) int {
	type ev struct {
		t     int64
		delta int
	}
	evs := make([]ev, 0, 2*len(iv))
	for _, x := range iv {
		evs = append(evs, ev{x.start, +1}, ev{x.end, -1})
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if a.t != b.t {
			if a.t < b.t {
				return -1
			}
			return 1
		}
		return a.delta - b.delta // ends before starts at the same instant
	})
	cur, best := 0, 0
	for _, e := range evs {
		cur += e.delta
		best = max(best, cur)
	}
	return best
}

// handoffs are the gaps between a slot being freed (a command's end) and
// its next use (a later command's start): events are taken in time order,
// freed slots queue up, and each start takes the slot freed longest ago.
// Starts that find no freed slot (filling the initial, never-used slots)
// are not handoffs.
func handoffs(iv []interval) []time.Duration {
	type ev struct {
		t     int64
		start bool
	}
	evs := make([]ev, 0, 2*len(iv))
	for _, x := range iv {
		evs = append(evs, ev{x.start, true}, ev{x.end, false})
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if a.t != b.t {
			return cmp.Compare(a.t, b.t)
		}
		if a.start == b.start {
			return 0
		}
		if !a.start {
			return -1 // an end at the same instant frees the slot first
		}
		return 1
	})
	var freed []int64
	var out []time.Duration
	for _, e := range evs {
		if !e.start {
			freed = append(freed, e.t)
			continue
		}
		if len(freed) > 0 {
			out = append(out, time.Duration(e.t-freed[0]))
			freed = freed[1:]
		}
	}
	return out
}

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

// burst starts n callers (argv from argsFor) behind one gate, opens the
// gate once all are parked on it, and waits for every caller. obs is the
// observer file the callers' commands append to.
func (h *harness) burst(dir string, env []string, n int, obs string, argsFor func(i int) []string) (*burstResult, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ready, passed, fifo := dir+"/gate.ready", dir+"/gate.passed", dir+"/gate.fifo"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		return nil, fmt.Errorf("mkfifo: %w", err)
	}
	errPath := dir + "/callers.stderr"
	errFile, err := os.OpenFile(errPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer errFile.Close()
	cmds := make([]*exec.Cmd, 0, n)
	killAll := func() {
		for _, c := range cmds {
			if c.ProcessState == nil {
				_ = c.Process.Kill()
			}
		}
	}
	for i := range n {
		args := append([]string{h.self, "gate", ready, fifo, passed, "--"}, argsFor(i)...)
		c := exec.Command(args[0], args[1:]...)
		c.Env = env
		c.Stderr = errFile
		if err := c.Start(); err != nil {
			killAll()
			for _, c := range cmds {
				_ = c.Wait()
			}
			return nil, err
		}
		cmds = append(cmds, c)
	}
	res := &burstResult{codes: map[int]int{}}
	waitFor := func(path string) bool {
		deadline := time.Now().Add(60 * time.Second)
		for fileSize(path) < int64(n) {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(2 * time.Millisecond)
		}
		return true
	}
	reap := func() {
		for _, c := range cmds {
			_ = c.Wait()
			res.codes[c.ProcessState.ExitCode()]++
			res.cpu += c.ProcessState.UserTime() + c.ProcessState.SystemTime()
		}
	}
	if !waitFor(ready) {
		killAll()
		reap()
		msg, _ := os.ReadFile(errPath)
		return nil, fmt.Errorf("only %d of %d callers reached the gate within 60s: %s", fileSize(ready), n, tail(msg, 600))
	}
	time.Sleep(20 * time.Millisecond) // let the last ones reach open(2)
	// Hold the write end open until every caller got through, so a late
	// one cannot block forever on a gate that already closed.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		killAll()
		reap()
		return nil, fmt.Errorf("open the gate: %w", err)
	}
	res.gateOpen = monoNow()
	if !waitFor(passed) {
		killAll()
	}
	w.Close()
	reap()
	res.makespan = time.Duration(monoNow() - res.gateOpen)
	if b, err := os.ReadFile(errPath); err == nil {
		idx := map[string]int{}
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				res.stderr = addLine(res.stderr, idx, normalizeLine(line, dir), 1)
			}
		}
	}
	if res.observed, err = readObserver(obs); err != nil {
		return res, err
	}
	if res.codes[-1] > 0 {
		msg, _ := os.ReadFile(errPath)
		return res, fmt.Errorf("%d caller(s) were killed (a caller never passed the gate?): %s", res.codes[-1], tail(msg, 600))
	}
	return res, nil
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
