package supervise

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// SignalName is the conventional name of a signal, such as SIGTERM.
func SignalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(sig))
}
