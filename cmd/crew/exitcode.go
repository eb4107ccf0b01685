package main

import (
	"errors"

	"github.com/crew-dev/crew/internal/dispatch"
)

// Exit codes. Everything a script can branch on is here, in one place.
const (
	exitOK            = 0
	exitFailed        = 1   // crew recover: an item failed; crew logs: no log
	exitUsage         = 64  // bad arguments or flags (EX_USAGE)
	exitWaitTimeout   = 124 // crew wait: timed out
	exitSlotsBusy     = 75  // not admitted: all slots busy (EX_TEMPFAIL)
	exitTaskActive    = 76  // not admitted: the task already has an active run
	exitCrewFailure   = 125 // crew itself failed: state root, lock timeout, config
	exitNotExecutable = 126 // the command exists but cannot be executed
	exitNotFound      = 127 // the command was not found
)

// exitCodeHelp is the table printed by `crew start --help` and in the README.
const exitCodeHelp = `Exit codes:
  0-255  the command's own exit code (128+N if signal N ended it)
  64     usage error: bad task name, missing command, bad flag, unknown pool
  75     not admitted: all slots are busy
  76     not admitted: the task already has an active run
  125    crew itself failed (state root unwritable, lock timeout, corrupt config)
  126    the command is not executable
  127    the command was not found`

// usageError marks errors in how crew was called.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// exitCodeFor maps an error returned by a command to crew's exit code.
func exitCodeFor(err error) int {
	var (
		refused  *dispatch.RefusedError
		usage    *dispatch.UsageError
		cliUsage *usageError
		launch   *dispatch.LaunchError
		signal   *dispatch.SignalledError
		notFound *dispatch.NotFoundError
		timeout  *waitTimeoutError
		noLog    *noLogError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &refused):
		if refused.Kind == dispatch.TaskActive {
			return exitTaskActive
		}
		return exitSlotsBusy
	case errors.As(err, &usage), errors.As(err, &cliUsage), errors.As(err, &notFound):
		return exitUsage
	case errors.As(err, &timeout):
		return exitWaitTimeout
	case errors.As(err, &noLog):
		return exitFailed
	case errors.As(err, &launch):
		return launch.Code
	case errors.As(err, &signal):
		return 128 + int(signal.Signal)
	default:
		return exitCrewFailure
	}
}
