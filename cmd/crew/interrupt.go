package main

import (
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/vocab"
	"golang.org/x/sys/unix"
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
// Signals channel, one at a time, when the store takes it, and remembers
// the first SIGINT or SIGQUIT the store took: one that ended the run (or
// the wait in line). One that arrives once nobody takes any (the run has
// ended) is only pending: it changes nothing of a foreground start's
// outcome, as before crew died by interrupts.
type signalRelay struct {
	out  chan os.Signal
	stop chan struct{}
	done chan struct{}
	once sync.Once
	// Written by the relay before done is closed, read after.
	taken, pending syscall.Signal
}

// relaySignals relays what arrives on in to the returned relay's out.
func relaySignals(in <-chan os.Signal) *signalRelay {
	r := &signalRelay{out: make(chan os.Signal), stop: make(chan struct{}), done: make(chan struct{})}
	go r.relay(in)
	return r
}

func (r *signalRelay) relay(in <-chan os.Signal) {
	defer close(r.done)
	for {
		var sig os.Signal
		select {
		case sig = <-in:
		case <-r.stop:
			r.drain(in)
			return
		}
		select {
		case r.out <- sig:
			note(&r.taken, sig)
		case <-r.stop:
			note(&r.pending, sig)
			r.drain(in)
			return
		}
	}
}

// drain notes the signals that came and were not passed on.
func (r *signalRelay) drain(in <-chan os.Signal) {
	for {
		select {
		case sig := <-in:
			note(&r.pending, sig)
		default:
			return
		}
	}
}

// note keeps in first the first SIGINT or SIGQUIT.
func note(first *syscall.Signal, sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok && isInterrupt(s) && *first == 0 {
		*first = s
	}
}

// finish stops the relay (the store is done with signals) and returns the
// first SIGINT or SIGQUIT the store took, and the first that came but was
// not taken (0: none).
func (r *signalRelay) finish() (taken, pending syscall.Signal) {
	r.once.Do(func() { close(r.stop) })
	<-r.done
	return r.taken, r.pending
}

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
// supervisor says so), or received by crew (the store took it) when the
// outcome is the run's (its command's exit, a stop before launch, a start
// that left the queue) rather than crew's failure or a refusal.
func interrupted(err error, received syscall.Signal) error {
	var exited *vocab.ExitError
	var stopped *vocab.SignalledError
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
