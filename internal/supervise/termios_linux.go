//go:build linux

package supervise

import "golang.org/x/sys/unix"

const (
	ioctlGetTermios = unix.TCGETS
	ioctlSetTermios = unix.TCSETS
	// vdisable is _POSIX_VDISABLE: a control character set to it is off.
	vdisable = 0
)
