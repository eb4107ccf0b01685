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

type rule struct {
	action string
	arg    string
}

var rules = sync.OnceValue(func() map[string]rule {
	m := map[string]rule{}
	for _, spec := range strings.Split(os.Getenv("CREW_FAILPOINT"), ",") {
		if spec == "" {
			continue
		}
		name, rest, _ := strings.Cut(spec, ":")
		action, arg, _ := strings.Cut(rest, ":")
		m[name] = rule{action: action, arg: arg}
	}
	return m
})

// Hit runs the rule for the named step, if any.
func Hit(name string) {
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
		panic("failpoint " + name)
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
func Error(name string) error {
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
func Skip(name string) bool {
	r, ok := rules()[name]
	return ok && r.action == "skip"
}
