package vocab

import (
	"fmt"
	"syscall"

	"github.com/crew-dev/crew/internal/record"
	"golang.org/x/sys/unix"
)

// A run's outcome codes, which its record keeps and crew start exits with
// (as coreutils timeout(1) and shells have them): the command's own exit
// status, or one of these.
const (
	// ExitTimedOut: --timeout stopped the command.
	ExitTimedOut = 124
	// ExitInternal: crew itself failed the run (or its lease ran out).
	ExitInternal = 125
	// ExitCannotRun: the command exists but cannot be executed.
	ExitCannotRun = 126
	// ExitNotFound: the command was not found.
	ExitNotFound = 127
)

// ExitSignalled is the outcome code of a command killed by sig: 128+N.
func ExitSignalled(sig syscall.Signal) int { return 128 + int(sig) }

// ExitError is a command that ran and exited non-zero (or was killed by
// a signal): crew start exits with the same code.
type ExitError struct {
	RunID record.RunID
	// Code is the command's exit status, 128+N if signal N killed it.
	Code int
	// TerminalInterrupt is SIGINT or SIGQUIT if that is what ended the
	// run from the terminal (Ctrl-C, Ctrl-\): the command, in the
	// terminal's foreground or on its own pseudo-terminal, was killed by
	// it, while crew's own job, which the terminal would have signalled
	// too, was not (crew's terminal raw, or the command's group in the
	// foreground). crew start passes it on to its job, so that the script
	// that ran it stops too.
	TerminalInterrupt syscall.Signal
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("run %s: command exited with status %d", e.RunID, e.Code)
}

// LaunchError is a command that could not be started; the run is recorded
// as failed with Reason.
type LaunchError struct {
	RunID record.RunID
	// NotFound: the command does not exist (else: it is not executable).
	NotFound bool
	Reason   string
}

func (e *LaunchError) Error() string { return e.Reason }

// InternalError is crew failing after admission; the run is recorded as
// failed with a reason that starts "crew internal error:".
type InternalError struct {
	RunID record.RunID
	Err   error
}

func (e *InternalError) Error() string {
	return fmt.Sprintf("crew internal error in run %s: %v", e.RunID, e.Err)
}
func (e *InternalError) Unwrap() error { return e.Err }

// SignalledError is a start abandoned because crew was told to stop before
// the command ran: by a signal, or by crew stop (By names it).
type SignalledError struct {
	Signal syscall.Signal
	RunID  record.RunID // empty if no run was reserved
	By     string       // the crew stop that asked, if it was one
}

func (e *SignalledError) Error() string {
	why := "received " + SignalName(e.Signal)
	if e.By != "" {
		why = "stopped by " + e.By
	}
	if e.RunID == "" {
		return fmt.Sprintf("%s while waiting for admission; nothing was started", why)
	}
	return fmt.Sprintf("%s before the command started; run %s recorded as stopped", why, e.RunID)
}

// SignalName is the conventional name of a signal, such as SIGTERM.
func SignalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// UnrecordedError is a run that ended but whose end crew could not record;
// crew exits 125. Kept says whether the outcome is in the owner lock file
// for recovery to record.
type UnrecordedError struct {
	RunID   record.RunID
	Outcome string // how it ended, in words: "succeeded, exit 0"
	Kept    bool
	Where   string // the owner lock file
	Err     error  // the last failure to record it
}

func (e *UnrecordedError) Error() string {
	msg := fmt.Sprintf("run %s ended (%s), but crew could not record it: %v; ", e.RunID, e.Outcome, e.Err)
	if e.Kept {
		return msg + fmt.Sprintf("the outcome is kept in %s, and `crew recover` records it once the state root is writable again", e.Where)
	}
	return msg + "its outcome could not be kept either: `crew recover` will record it as interrupted, exit status unknown"
}

func (e *UnrecordedError) Unwrap() error { return e.Err }
