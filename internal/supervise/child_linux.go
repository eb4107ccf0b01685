//go:build linux

package supervise

import (
	"errors"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// siginfoChld is the part of the kernel's siginfo_t that waitid fills in
// for a child: si_pid, si_uid and si_status follow si_signo, si_errno and
// si_code in a union aligned like a pointer ([0]uintptr places it so on
// every architecture). unix.Siginfo exposes none of them.
type siginfoChld struct {
	signo, errno, code int32
	_                  [0]uintptr
	pid                int32
	uid                uint32
	status             int32
	_                  [128]byte // room for the kernel's whole siginfo_t
}

// si_code values for SIGCHLD (asm-generic/siginfo.h).
const (
	cldExited  = 1
	cldKilled  = 2
	cldDumped  = 3
	cldTrapped = 4
	cldStopped = 5
)

// seesStops: watchChild reports the command's stops, so the job-control
// path (commandStopped) follows from them.
const seesStops = true

// watchChild reports the command's stops and its exit, never reaping it:
// waitid(WEXITED|WSTOPPED|WNOWAIT) peeks; a stop is then consumed with
// waitid(WSTOPPED), which cannot reap; an exit is left for child.reap. The
// channel closes after the exit.
func watchChild(c *child) <-chan childEvent {
	events := make(chan childEvent, 4)
	pid := c.pid
	go func() {
		defer close(events)
		for {
			var info siginfoChld
			err := waitid(pid, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT, &info)
			if err != nil || info.pid == 0 {
				// Cannot happen for our own unreaped child; let reap find
				// out what became of it.
				events <- childEvent{exited: true}
				return
			}
			switch info.code {
			case cldStopped, cldTrapped:
				var consumed siginfoChld
				_ = waitid(pid, unix.WSTOPPED|unix.WNOHANG, &consumed)
				events <- childEvent{stopSig: syscall.Signal(info.status)}
			case cldExited, cldKilled, cldDumped:
				events <- childEvent{exited: true}
				return
			}
		}
	}()
	return events
}

func waitid(pid, options int, info *siginfoChld) error {
	for {
		err := unix.Waitid(unix.P_PID, pid, (*unix.Siginfo)(unsafe.Pointer(info)), options, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
