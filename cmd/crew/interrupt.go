package main

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/supervise"
)

// A crew start whose run ended because of SIGINT or SIGQUIT (typed at the
// terminal, or sent to crew) records it, and then dies by that signal
// with its default disposition instead of exiting 130 or 131, as
// coreutils timeout and well-behaved shell children do: a shell waiting
// for a child that exited, even with 130, takes it that the child handled
// the interrupt and runs the script's next line, or the loop's next turn;
// a child killed by SIGINT (while the shell got SIGINT too) stops the
// script. SIGTERM and SIGHUP keep their exit codes, 128+N: shells give
// them no such meaning, and scripts branch on the codes.

// stopSignals are the signals crew start catches and forwards to its
// command's group (before admission, so that none is lost in between).
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// signalRelay passes the stop signals crew receives on to the store's
// Signals channel, and remembers the first SIGINT or SIGQUIT among them.
type signalRelay struct {
	out       chan os.Signal
	interrupt atomic.Int32
}

// relaySignals relays what arrives on in to the returned relay's out.
func relaySignals(in <-chan os.Signal) *signalRelay {
	r := &signalRelay{out: make(chan os.Signal, cap(in))}
	go func() {
		for sig := range in {
			if s, ok := sig.(syscall.Signal); ok && isInterrupt(s) {
				r.interrupt.CompareAndSwap(0, int32(s)) // before it is passed on, so what was taken is known
			}
			r.out <- sig
		}
	}()
	return r
}

// received is the first SIGINT or SIGQUIT crew received, 0 if none.
func (r *signalRelay) received() syscall.Signal { return syscall.Signal(r.interrupt.Load()) }

func isInterrupt(s syscall.Signal) bool { return s == syscall.SIGINT || s == syscall.SIGQUIT }

// interruptedError is a crew start that ended because of SIGINT or
// SIGQUIT: crew says what it must about err (nil: nothing), and then dies
// by sig (main, through die).
type interruptedError struct {
	err error
	sig syscall.Signal
	// job: the signal was typed at the terminal, which reached only the
	// command (crew's terminal raw, or the command's group in the
	// terminal's foreground); crew's own job gets it too, as it would have
	// from the terminal without crew in between.
	job bool
}

func (e *interruptedError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *interruptedError) Unwrap() error { return e.err }

// interrupted makes err, crew start's outcome, an *interruptedError if
// the run ended because of SIGINT or SIGQUIT: typed at the terminal (the
// supervisor says so), or received by crew (the relay saw it) when the
// outcome is the run's (its command's exit, a stop before launch, a start
// that left the queue) rather than crew's failure or a refusal.
func interrupted(err error, received syscall.Signal) error {
	var exited *supervise.ExitError
	var stopped *supervise.SignalledError
	switch {
	case errors.As(err, &exited) && exited.TerminalInterrupt != 0:
		return &interruptedError{err: err, sig: exited.TerminalInterrupt, job: true}
	case errors.As(err, &stopped) && stopped.By == "" && isInterrupt(stopped.Signal):
		return &interruptedError{err: err, sig: stopped.Signal}
	case received != 0 && (err == nil || exited != nil || (stopped != nil && stopped.By == "")):
		return &interruptedError{err: err, sig: received}
	}
	return err
}

// dieGrace is how long crew waits for a signal it raised on itself before
// it exits with 128+N instead.
const dieGrace = time.Second

// die kills crew by e's signal with its default disposition (reset,
// unblocked, raised): a SIGQUIT dumps no core of crew's. A signal typed at
// the terminal goes to crew's whole job if crew's process group is still
// its terminal's foreground group: the terminal would have signalled
// every process of it (the script that ran crew among them); crew's group
// is its job, as for job control (supervise stops it on Ctrl-Z the same
// way). It returns only if the signal did not kill crew.
func (e *interruptedError) die() {
	if e.sig == syscall.SIGQUIT {
		_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	}
	if err := defaultAction(e.sig); err != nil {
		return
	}
	if e.job && inForeground() {
		_ = unix.Kill(0, e.sig)
	}
	raise(e.sig)
	time.Sleep(dieGrace)
}

// inForeground reports whether crew's process group is the foreground
// group of the terminal on stdin.
func inForeground() bool {
	pgrp, err := unix.IoctlGetInt(int(os.Stdin.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp > 1 && pgrp == unix.Getpgrp()
}
