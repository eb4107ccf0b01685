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
	fd, ok = controllingTTY(stdin)
	if !ok || foregroundGroup(fd) != unix.Getpgrp() {
		return 0, false // crew itself runs in the background: leave the terminal alone
	}
	return fd, true
}

// controllingTTY returns stdin's descriptor if it is crew's controlling
// terminal (one whose foreground group can be asked for).
func controllingTTY(stdin any) (fd int, ok bool) {
	f, isFile := stdin.(*os.File)
	if !isFile || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	fd = int(f.Fd())
	if _, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err != nil {
		return 0, false
	}
	return fd, true
}

// foregroundGroup is the terminal's foreground process group, or -1.
func foregroundGroup(fd int) int {
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil {
		return -1
	}
	return pgrp
}

// setForeground makes pgrp the terminal's foreground group. crew may be
// in the background when it does, so it ignores SIGTTOU for the call.
func setForeground(fd, pgrp int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pgrp)
}

// reclaimTTY makes crew's own process group the terminal's foreground
// group again once the command is done, if the command's group has it.
func (s *supervisor) reclaimTTY() {
	if s.ownsTTY && s.pgid > 0 && foregroundGroup(s.ttyFD) == s.pgid {
		setForeground(s.ttyFD, unix.Getpgrp())
	}
}

// jobControl makes crew behave as its command's shell job on a terminal:
// it stops when its command stops and continues when it is continued.
type jobControl struct {
	tty  int
	cont chan os.Signal
}

// startJobControl starts listening for SIGCONT if stdin is crew's
// controlling terminal; nil otherwise (a detached supervisor, a pipe).
func startJobControl(stdin any) *jobControl {
	fd, ok := controllingTTY(stdin)
	if !ok {
		return nil
	}
	j := &jobControl{tty: fd, cont: make(chan os.Signal, 1)}
	signal.Notify(j.cont, syscall.SIGCONT)
	return j
}

// continued delivers the SIGCONTs crew receives (never, without a
// terminal).
func (j *jobControl) continued() <-chan os.Signal {
	if j == nil {
		return nil
	}
	return j.cont
}

func (j *jobControl) close() {
	if j != nil {
		signal.Stop(j.cont)
	}
}

// commandStopped makes crew's job stop with its command (Ctrl-Z, or a
// command in the background that touched the terminal), so that the shell
// sees the job stopped and returns to its prompt: crew takes the terminal
// back if its command has it, then stops its own process group, the job
// the shell started, with the same kind of signal. Without a terminal the
// command just stays stopped until whoever stopped it continues it (or
// crew stop does).
func (s *supervisor) commandStopped(sig syscall.Signal, j *jobControl) {
	if j == nil {
		return
	}
	s.pty.release()
	if foregroundGroup(j.tty) == s.pgid {
		setForeground(j.tty, unix.Getpgrp())
	}
	own := syscall.SIGTSTP
	switch {
	case s.pty != nil:
		// crew catches SIGTSTP then (ptyTerm.tstp), and once caught Go
		// never gives it its default action back: stop for certain.
		own = syscall.SIGSTOP
	case sig == syscall.SIGTTIN || sig == syscall.SIGTTOU:
		own = sig
	}
	// Group 0 is crew's own: stopping its own job is what job control
	// means (a shell sees a job stopped when its processes are).
	_ = unix.Kill(0, own)
}

// continued carries a SIGCONT on to the command (fg or bg in the shell):
// if crew is now in the terminal's foreground, the command's group gets
// the terminal, so that it can read and Ctrl-C reaches it; either way its
// group is continued.
func (s *supervisor) continued(j *jobControl) {
	if s.pty != nil {
		// The command keeps its own terminal; crew's goes raw again if
		// crew has it, and its keystrokes flow again.
		s.pty.resume(foregroundGroup(j.tty) == unix.Getpgrp())
	} else if foregroundGroup(j.tty) == unix.Getpgrp() {
		setForeground(j.tty, s.pgid)
		s.ownsTTY, s.ttyFD = true, j.tty
	}
	s.signalGroup(syscall.SIGCONT)
}
