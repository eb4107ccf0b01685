package supervise

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// foregroundTTY returns the terminal the command should own, if crew was
// started in the foreground of a terminal on stdin. The command runs in a
// process group of its own; on a terminal that group must also be the
// terminal's foreground group, or the command is stopped (SIGTTIN) the
// moment it reads from the terminal, and Ctrl-C would not reach it.
func foregroundTTY(stdin any) (fd int, ok bool) {
	f, isFile := stdin.(*os.File)
	if !isFile || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	fd = int(f.Fd())
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || pgrp != unix.Getpgrp() {
		return 0, false // crew itself runs in the background: leave the terminal alone
	}
	return fd, true
}

// reclaimTTY makes crew's own process group the terminal's foreground
// group again once the command is done. crew is in the background at that
// point, so it must ignore SIGTTOU for the call.
func reclaimTTY(fd int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, unix.Getpgrp())
}
