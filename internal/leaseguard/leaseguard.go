// Package leaseguard keeps a run's command from outliving the etcd lease that
// holds its slot.
//
// With the etcd backend, a run's slot is an etcd lease that the crew
// supervisor renews. If the supervisor dies (SIGKILL), is SIGSTOPped, hangs,
// or loses etcd, the lease expires after its TTL and another host may be
// admitted: the run's command must be dead by then, or the cap is exceeded
// (DESIGN.md invariant 1). The supervisor cannot enforce that itself (it is
// the thing that died or froze), so it starts a guard: a small process,
// crew re-executed as "crew __lease-guard", whose only job is to kill the
// run's process group when the supervisor stops vouching for the lease.
//
// Why the guard leads the group. The supervisor starts the guard first, as
// the leader of a new process group (its pid is the group's id), and then
// starts the command into that group (SysProcAttr{Setpgid: true, Pgid:
// g.Pgid()}). A process group id is a pid, and the kernel does not hand a pid
// to a new process while a process, or an unreaped zombie, still has it as
// its pid or process group id. The guard lives as long as the run, and only
// the supervisor reaps it, so kill(-pgid) from the guard (its own group) or
// from the supervisor (while Alive, through Signal) provably reaches the
// run's own processes and nobody else's (invariant 8: never a group id read
// from a file).
//
// Why a monotonic deadline. The supervisor sends deadlines: CLOCK_MONOTONIC
// instants up to which it knows the lease to be valid (it should take
// Monotonic() before sending the keep-alive, add the granted TTL and subtract
// a safety margin for the time SIGKILL takes to land). CLOCK_MONOTONIC is one
// clock for the whole host, so the supervisor's and the guard's readings
// agree, and it does not jump when someone sets the wall clock. (Linux time
// namespaces could offset it, but the guard is the supervisor's own child and
// inherits its namespace.) The guard never trusts a timer alone: it sleeps
// at most pollInterval at a time and re-reads the clock, so a timer
// implementation that counts time differently (macOS sleep) cannot make the
// kill late by more than that.
//
// The guard kills its whole group with SIGKILL, itself included, when:
//   - the deadline passes by its own clock (the supervisor stopped renewing:
//     SIGSTOP, hung, partitioned from etcd): it writes one line to stderr;
//   - its stdin reaches EOF without an end message (the supervisor died: the
//     kernel closed the pipe): it writes one line to stderr;
//   - the supervisor sends an invalid message (fail closed): one line too;
//   - the supervisor sends end (the run is over): silently.
//
// It ignores SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU and
// SIGPIPE: the supervisor forwards stop signals to the whole group and a
// terminal's Ctrl-C reaches the whole group, and those are for the command.
// (SIGPIPE matters too: when the supervisor is dead, the guard's writes to
// the pipe it shared with it fail, and must not kill the guard before it
// kills the group.)
//
// What remains possible, and is not covered:
//   - the whole host freezes (VM paused, laptop suspended): nothing runs on
//     it, the guard included, while the lease expires in etcd's time;
//   - someone SIGSTOPs or SIGKILLs the guard itself (SIGSTOP and SIGKILL
//     cannot be ignored; the supervisor must never send SIGSTOP to the group,
//     only SIGTSTP, which the guard ignores). Then nothing enforces the
//     deadline. The supervisor sees a killed guard (Alive false, Extend
//     errors) but not a stopped one until Confirm times out;
//   - a process that leaves the group (setsid, setpgid: daemons, some shells'
//     job control) escapes the kill;
//   - SIGKILL is sent, not completed: a process in uninterruptible sleep
//     (D state, e.g. on a hung NFS mount) dies only when it wakes;
//   - the guard holds no descriptors but its stdin, stdout and stderr: Go
//     opens everything close-on-exec, and Main also closes any descriptor
//     the supervisor itself inherited without close-on-exec. But the guard
//     relies on nobody else holding the write end of its stdin: a supervisor
//     that dup'ed that descriptor without close-on-exec into another process
//     would hide its own death from the guard.
//
// Wire format, supervisor to guard (stdin): 8-byte little-endian int64
// messages. A positive value is a deadline in monotonic nanoseconds; a
// smaller deadline than the current one is ignored (deadlines only move
// forward). 0 is end; -1 is ping. Anything else is invalid.
//
// Guard to supervisor (stdout): single bytes. 'R' once it ignores the
// signals and has the first deadline (Start waits for it); 'P' answers a
// ping; before it kills its group it writes why: 'E' (end), 'D' (deadline
// passed), 'X' (EOF), 'I' (invalid message). EOF on this pipe tells the
// supervisor that the guard has exited, without reaping it.
package leaseguard

import (
	"time"

	"golang.org/x/sys/unix"
)

// Messages on the guard's stdin (besides positive deadlines).
const (
	msgEnd  int64 = 0
	msgPing int64 = -1
)

// Bytes on the guard's stdout.
const (
	codeReady    byte = 'R'
	codePong     byte = 'P'
	codeEnd      byte = 'E'
	codeDeadline byte = 'D'
	codeEOF      byte = 'X'
	codeInvalid  byte = 'I'
)

// Monotonic is CLOCK_MONOTONIC now, as a duration since the clock's origin:
// the same clock in every process on the host (see the package comment).
func Monotonic() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// CLOCK_MONOTONIC exists on every Linux and on macOS >= 10.12;
		// without it no deadline could be proven, so do not guess.
		panic("leaseguard: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return time.Duration(ts.Nano())
}
