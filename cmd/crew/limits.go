package main

import (
	"errors"
	"strings"
	"syscall"

	"github.com/crew-dev/crew/internal/fdbudget"
	"github.com/crew-dev/crew/internal/supervise"
)

// checkOpenFiles refuses a command when fewer descriptors were free at
// crew's start than it needs (fdbudget.Need; crew's own detached
// supervisor, args starting with supervise.Command, was handed
// fdbudget.Handed of them). fdbudget counted them in its init, before
// anything opened a file; it has already refused, there, a process that
// has not even the supervisor's need, so that the Go runtime's poller
// cannot die for want of one before crew says why.
func checkOpenFiles(args []string) error {
	need := fdbudget.Need
	if len(args) > 0 && args[0] == supervise.Command {
		need -= fdbudget.Handed
	}
	return fdbudget.Check(need)
}

// resourceHint says what to do about crew running out of descriptors
// anyway (other processes share ENFILE's table), unless the message says
// it already.
func resourceHint(err error) string {
	if strings.Contains(err.Error(), "ulimit") {
		return ""
	}
	switch {
	case errors.Is(err, syscall.EMFILE):
		return "crew ran out of file descriptors: raise the limit with `ulimit -n`"
	case errors.Is(err, syscall.ENFILE):
		return "the system's table of open files is full: close files elsewhere, or raise fs.file-max"
	}
	return ""
}
