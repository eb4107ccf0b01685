package dispatch

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// signalName is the conventional name of a signal, such as SIGTERM.
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(sig))
}
