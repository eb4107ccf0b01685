package main

import (
	"errors"

	"github.com/crew-dev/crew/internal/vocab"
)

// Exit codes. Everything a script can branch on is here, in one place:
// libraries return typed errors, and exitCodeFor alone turns them into
// numbers.
const (
	exitOK            = 0
	exitFailed        = 1                   // crew recover: an item failed; crew logs: no log
	exitUsage         = 64                  // bad arguments or flags (EX_USAGE)
	exitWaitTimeout   = vocab.ExitTimedOut  // crew wait: timed out
	exitSlotsBusy     = 75                  // not admitted: all slots busy (EX_TEMPFAIL)
	exitTaskActive    = 76                  // not admitted: the task already has an active run
	exitNoPerm        = 77                  // crew stop: another user's run or waiting start (EX_NOPERM)
	exitNested        = 78                  // not admitted: it would wait for its own ancestor runs (EX_CONFIG)
	exitCrewFailure   = vocab.ExitInternal  // crew itself failed: state root, lock timeout, config, resources, full disk
	exitNotExecutable = vocab.ExitCannotRun // the command exists but cannot be executed
	exitNotFound      = vocab.ExitNotFound  // the command was not found
)

// exitCodeHelp is the table printed by `crew start --help` and in the README.
const exitCodeHelp = `Exit codes:
  0-255  the command's own exit code (128+N if signal N ended it)
  64     usage error: bad task name, missing command, bad flag, unknown pool
  75     not admitted: all slots are busy (or --refused-exit's code)
  76     not admitted: the task already has an active run (or --refused-exit's code)
  78     not admitted: a nested start (run by a crew command: CREW_RUN_ID) could
         only wait for the runs it was started from, which wait for it
  124    --timeout: the command ran out of time (its last attempt, with --retries)
  125    crew itself failed (state root unwritable, lock timeout, unusable crew.json,
         a queue that cannot be listed, too few file descriptors, the run's end could
         not be recorded on a full disk)
  126    the command is not executable
  127    the command was not found

A command can exit 75 or 76 itself. To tell a refusal from the command's own
exit code, choose a code the command never uses: --refused-exit 200.`

// usageError marks errors in how crew was called.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// chosenRefusal is a refused start as crew start --refused-exit and
// --quiet want it to end: with their code (code < 0: crew's own, 75 or
// 76), and without a message if quiet.
type chosenRefusal struct {
	err   error // a *vocab.RefusedError, wrapped
	code  int
	quiet bool
}

func (e *chosenRefusal) Error() string { return e.err.Error() }
func (e *chosenRefusal) Unwrap() error { return e.err }

// exitStatus is an exit code a command chose on purpose without an error
// to report (crew wait: the run's own exit code).
type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return "" }

// exitCodeFor maps an error returned by a command to crew's exit code.
func exitCodeFor(err error) int {
	var (
		refused  *vocab.RefusedError
		chosen   *chosenRefusal
		usage    *vocab.UsageError
		ambig    *vocab.AmbiguousError
		cliUsage *usageError
		notFound *vocab.NotFoundError
		exited   *vocab.ExitError
		launch   *vocab.LaunchError
		signal   *vocab.SignalledError
		timeout  *waitTimeoutError
		noLog    *noLogError
		failed   *itemsFailedError
		status   *exitStatus
		nested   *vocab.NestedDeadlockError
		noPerm   *vocab.NotPermittedError
		onStore  *vocab.RefusedOnStoreError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &status):
		return status.code
	case errors.As(err, &exited):
		return exited.Code
	case errors.As(err, &chosen) && chosen.code >= 0:
		return chosen.code
	case errors.As(err, &nested):
		return exitNested
	case errors.As(err, &noPerm):
		return exitNoPerm
	case errors.As(err, &refused):
		if refused.Kind == vocab.TaskActive {
			return exitTaskActive
		}
		return exitSlotsBusy
	case errors.As(err, &usage), errors.As(err, &cliUsage), errors.As(err, &notFound), errors.As(err, &ambig), errors.As(err, &onStore):
		return exitUsage
	case errors.As(err, &timeout):
		return exitWaitTimeout
	case errors.As(err, &noLog), errors.As(err, &failed):
		return exitFailed
	case errors.As(err, &launch):
		if launch.NotFound {
			return exitNotFound
		}
		return exitNotExecutable
	case errors.As(err, &signal):
		return vocab.ExitSignalled(signal.Signal)
	default:
		return exitCrewFailure
	}
}

// silent reports whether err is an outcome to exit with, not a message
// for the user: the command's own exit status says it all, or a refusal
// crew start was asked to keep quiet about (--quiet).
func silent(err error) bool {
	var exited *vocab.ExitError
	var status *exitStatus
	var chosen *chosenRefusal
	return errors.As(err, &exited) || errors.As(err, &status) || (errors.As(err, &chosen) && chosen.quiet)
}
