package main

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
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
