package main

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// minOpenFiles is the fewest open files crew runs with. Measured on Linux
// with `ulimit -n N` (plain and -race builds alike): `crew start` needs 21,
// `start --wait` 21, `start --detach` 23 (the handover pipe and the
// inherited locks), `recover` of ten dead runs 15, `status` 10. Below 9 the
// Go runtime itself dies ("fatal error: runtime: netpollinit failed")
// before crew can say anything useful. The margin over 23 covers what the
// measurement did not reach: a contended admission lock, reaping dead
// runs, more processes to watch. e2e/limits_test.go runs the hungriest
// paths at exactly this limit, so it fails when crew outgrows it.
const minOpenFiles = 32

// limitError is a file-descriptor limit below what crew needs.
type limitError struct{ have uint64 }

func (e *limitError) Error() string {
	return fmt.Sprintf("this process may open only %d files (ulimit -n), but crew needs at least %d: "+
		"raise the limit with `ulimit -n %d` (or more) and try again", e.have, minOpenFiles, minOpenFiles)
}

// checkOpenFiles refuses to run below minOpenFiles. It must run before
// anything opens a file: the Go runtime's poller is set up on the first
// open, and with too few descriptors that is a fatal error, not an error
// crew can report. (Go has already raised the soft limit to the hard one,
// so what is checked is all crew can get.)
func checkOpenFiles() error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return nil // cannot tell: crew's own errors will say what ran out
	}
	if rl.Cur < minOpenFiles {
		return &limitError{have: rl.Cur}
	}
	return nil
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
