package supervise

import (
	"errors"
	"fmt"
	"syscall"
)

// shortOf says which of crew's own resources a failed fork/exec ran out
// of, if that is why it failed. Such a failure is crew's (or the
// machine's), never the command's: the run is recorded as crew's internal
// error and crew exits 125, not 126 ("not executable").
func shortOf(startErr error) (what string, ok bool) {
	switch {
	case errors.Is(startErr, syscall.EMFILE):
		return "crew ran out of file descriptors; raise the limit with `ulimit -n`", true
	case errors.Is(startErr, syscall.ENFILE):
		return "the system's table of open files is full", true
	case errors.Is(startErr, syscall.EAGAIN):
		return "too many processes (see `ulimit -u`) or another resource limit", true
	case errors.Is(startErr, syscall.ENOMEM):
		return "out of memory", true
	}
	return "", false
}

// resourceFailure records a command that could not be started because
// crew lacked a resource.
func (s *supervisor) resourceFailure(startErr error, what string) error {
	return s.internalFailure(fmt.Errorf("cannot start the command: %w (%s)", startErr, what))
}
