package leaseguard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ignoredSignals are for the command, not the guard (see the package comment).
var ignoredSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE,
}

const (
	// pollInterval bounds how long the guard sleeps before it re-reads
	// CLOCK_MONOTONIC, whatever clock Go's timers run on.
	pollInterval = 100 * time.Millisecond
	// writeBudget bounds how long the guard waits for its stderr line (a
	// terminal held by Ctrl-S, a full pipe) before it kills anyway. The
	// guard starts killing this long before the deadline, so that a
	// blocked stderr cannot make the kill late.
	writeBudget = 25 * time.Millisecond
)

// Main is the guard process's main function: crew's main calls it for
// "crew __lease-guard" (tests: their TestMain). It reads os.Stdin as the
// package comment describes and returns the exit code; it normally never
// returns, because it kills its own group, itself included. It needs nothing
// initialised but the Go runtime.
func Main() int {
	// First, before anything can be slow: a SIGTERM to the group must not
	// kill the guard. Start waits for codeReady, written after this.
	signal.Ignore(ignoredSignals...)
	supervisor := os.Getppid()
	pid := os.Getpid()
	pgid := unix.Getpgrp()
	// Refuse to kill a group this process does not lead: run by hand
	// inside a pipeline, or as pid 1 (kill(-1) would signal everything).
	if pgid != pid || pgid <= 1 {
		fmt.Fprintf(os.Stderr, "crew: lease guard: refusing to run: process %d does not lead its own process group (it is in group %d); only crew starts the lease guard\n", pid, pgid)
		return 2
	}
	closeInheritedFDs()

	g := guard{supervisor: supervisor, pgid: pgid}
	first, err := readMessage(os.Stdin)
	switch {
	case err != nil:
		return g.kill(codeEOF)
	case first == msgEnd:
		return g.kill(codeEnd)
	case first <= 0:
		return g.kill(codeInvalid)
	}
	deadline := time.Duration(first)
	_, _ = os.Stdout.Write([]byte{codeReady})

	msgs := make(chan int64)
	go func() {
		for {
			v, err := readMessage(os.Stdin)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- v
		}
	}()

	timer := time.NewTimer(pollInterval)
	for {
		remaining := deadline - writeBudget - Monotonic()
		if remaining <= 0 {
			return g.kill(codeDeadline)
		}
		timer.Reset(min(remaining, pollInterval))
		select {
		case v, ok := <-msgs:
			switch {
			case !ok:
				return g.kill(codeEOF)
			case v == msgEnd:
				return g.kill(codeEnd)
			case v == msgPing:
				_, _ = os.Stdout.Write([]byte{codePong})
			case v < 0:
				g.invalid = v
				return g.kill(codeInvalid)
			case time.Duration(v) > deadline:
				deadline = time.Duration(v)
			}
		case <-timer.C:
		}
	}
}

// readMessage reads one 8-byte message; a short read is an error (EOF in
// the middle of a message is the supervisor dying too).
func readMessage(r io.Reader) (int64, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(b[:])), nil
}

type guard struct {
	supervisor int
	pgid       int
	invalid    int64
}

// kill says why on stdout (for the supervisor) and, except for end, on
// stderr (for the user), then kills the guard's whole process group, itself
// included.
func (g *guard) kill(code byte) int {
	// A pipe with a live reader has room for these few bytes; with a dead
	// one the write fails (SIGPIPE is ignored). It never blocks.
	_, _ = os.Stdout.Write([]byte{code})
	var line string
	switch code {
	case codeDeadline:
		line = fmt.Sprintf("crew: lease guard: the supervisor (pid %d) stopped renewing the run's lease; killed the run's process group %d before the lease could expire\n", g.supervisor, g.pgid)
	case codeEOF:
		line = fmt.Sprintf("crew: lease guard: the supervisor (pid %d) exited without ending the run; killed the run's process group %d\n", g.supervisor, g.pgid)
	case codeInvalid:
		line = fmt.Sprintf("crew: lease guard: the supervisor (pid %d) sent an invalid message (%d); killed the run's process group %d\n", g.supervisor, g.invalid, g.pgid)
	}
	if line != "" {
		written := make(chan struct{})
		go func() {
			_, _ = os.Stderr.WriteString(line)
			close(written)
		}()
		select {
		case <-written:
		case <-time.After(writeBudget):
		}
	}
	err := unix.Kill(-g.pgid, unix.SIGKILL)
	if err == nil {
		// SIGKILL to our own group includes us; we are gone before
		// this returns, or very soon after.
		time.Sleep(time.Second)
		err = errors.New("still alive after SIGKILL to its own group")
	}
	fmt.Fprintf(os.Stderr, "crew: lease guard: could not kill process group %d: %v\n", g.pgid, err)
	return 1
}

// closeInheritedFDs closes every descriptor above stderr that lacks
// close-on-exec. Go (runtime and os) opens all of its own descriptors
// close-on-exec, so such a descriptor can only have come through exec: the
// supervisor inherited it (a make jobserver, a lock handed down by a
// parent) and so did the guard. The guard needs none of them, and holding
// one could keep a lock or a pipe alive. Best effort: without /dev/fd there
// is nothing to list, and the guard's safety does not depend on it.
func closeInheritedFDs() {
	entries, err := os.ReadDir("/dev/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // closed meanwhile (the directory's own fd), or Go's
		}
		_ = unix.Close(fd)
	}
}
