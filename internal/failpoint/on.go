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

// Skip reports whether the named mechanism is to be skipped.
func Skip(name string) bool {
	r, ok := rules()[name]
	return ok && r.action == "skip"
}
