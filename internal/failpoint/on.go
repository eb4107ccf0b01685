//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled is true: this binary was built with -tags failpoints.
const Enabled = true

// rules are CREW_FAILPOINT's, read once. A CREW_FAILPOINT that names no
// failpoint, or gives one an action it does not take, stops the process
// at its start (init), before it can do anything a test would then take
// for what it meant to force.
var rules = sync.OnceValue(func() map[Name]rule {
	m, err := parseRules(os.Getenv("CREW_FAILPOINT"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "crew: %v\n", err)
		os.Exit(125)
	}
	return m
})

func init() { rules() }

// Hit runs the rule for the named step, if any.
func Hit(name Name) {
	r, ok := rules()[name]
	if !ok {
		return
	}
	switch r.action {
	case "kill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	case "wait":
		_ = os.WriteFile(r.arg+".reached", []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o600)
		for {
			if _, err := os.Stat(r.arg); err == nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	case "panic":
		panic("failpoint " + name.String())
	}
}

// errnos are the errors an `error` rule can make a step fail with.
var errnos = map[string]syscall.Errno{
	"ENOSPC": syscall.ENOSPC, "EDQUOT": syscall.EDQUOT, "EACCES": syscall.EACCES, "EIO": syscall.EIO,
	"EMFILE": syscall.EMFILE, "ENFILE": syscall.ENFILE, "EAGAIN": syscall.EAGAIN, "ENOMEM": syscall.ENOMEM,
}

// Error returns the error the named step is to fail with, if any: the
// rule <name>:error:<ERRNO> fails it every time; <name>:error:<ERRNO>:<path>
// fails it until <path> exists, and creates <path>.reached on the first
// failure, so that a test knows the step failed before it lets it pass.
func Error(name Name) error {
	r, ok := rules()[name]
	if !ok || r.action != "error" {
		return nil
	}
	code, gate, _ := strings.Cut(r.arg, ":")
	errno, ok := errnos[code]
	if !ok {
		panic(fmt.Sprintf("failpoint %s: unknown errno %q", name, code))
	}
	if gate == "" {
		return errno
	}
	if _, err := os.Stat(gate); err == nil {
		return nil
	}
	if _, err := os.Stat(gate + ".reached"); err != nil {
		_ = os.WriteFile(gate+".reached", []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o600)
	}
	return errno
}

// Skip reports whether the named mechanism is to be skipped.
func Skip(name Name) bool {
	r, ok := rules()[name]
	return ok && r.action == "skip"
}
