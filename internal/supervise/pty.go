package supervise

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/crew-dev/crew/internal/failpoint"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// ptyTerm is the pseudo-terminal a command runs on when crew itself runs
// on an interactive terminal: stdin, stdout and stderr all terminals, and
// crew in the terminal's foreground. Programs then see a terminal (colours,
// progress bars, line-buffered output) while crew still reads all of their
// output for the log.
//
// The command runs in a session of its own with the pseudo-terminal as its
// controlling terminal; its process group, whose id is its pid as before,
// is that terminal's foreground group, so what is typed reaches it and its
// terminal's own line discipline turns Ctrl-C into SIGINT for it, exactly
// as a real terminal does. crew puts its own terminal in raw mode and
// copies keystrokes across, and restores the terminal whenever it gives it
// up: when the run ends, when the job stops, on a panic.
//
// One thing a terminal does that a pseudo-terminal in another session
// cannot: the kernel drops the job-control stop (Ctrl-Z) for a process
// group with no parent in its session, such as the command's. So crew
// does it: a typed suspend character (when the command's terminal has
// signals on and the command's own group is its foreground) stops the
// command's group with SIGSTOP, and crew's job stops with it, as with
// pipes (commandStopped). A job of a shell run as the command is stopped
// by the kernel as usual, and that shell takes the terminal back.
type ptyTerm struct {
	master *os.File     // crew's side, non-blocking so that closing it ends a read
	slave  *os.File     // the command's side; closed in crew once it started
	tty    int          // crew's terminal (stdin), which crew makes raw
	pgid   atomic.Int32 // the command's process group, once it runs
	out    *os.File     // crew's stdout, whose size the pseudo-terminal takes

	mu    sync.Mutex
	saved *unix.Termios // crew's terminal before raw mode; nil when not raw

	wakeR, wakeW *os.File      // rings the input loop (continued, closing)
	suspend      chan struct{} // the suspend character was typed
	winch        chan os.Signal
	tstp         chan os.Signal // SIGTSTP sent to crew: stop the job as Ctrl-Z does
	closing      chan struct{}
	done         sync.WaitGroup
}

// ptyFor returns the pseudo-terminal for the run, or nil for pipes: with
// --no-pty, with --tag (which needs stdout and stderr apart, in lines),
// without a terminal on each of stdin, stdout and stderr, or when crew runs
// in the background (a job started with &). A system that will not give
// one (no /dev/pts in a container, all in use) gets pipes and a warning:
// the run is worth more than its colours.
func (s *supervisor) ptyFor() *ptyTerm {
	if s.NoPTY || s.Tag != "" {
		return nil
	}
	tty, ok := foregroundTTY(s.Stdin)
	if !ok {
		return nil
	}
	out, ok := s.Stdout.(*os.File)
	if !ok || !term.IsTerminal(int(out.Fd())) {
		return nil
	}
	if errf, ok := s.Stderr.(*os.File); !ok || !term.IsTerminal(int(errf.Fd())) {
		return nil
	}
	t, err := openPTY(tty, out)
	if err != nil {
		s.Warn(fmt.Errorf("the command runs with pipes, not a terminal of its own: %w (--no-pty asks for pipes without this warning)", err))
		return nil
	}
	return t
}

// openPTY opens a pseudo-terminal with the mode and size of crew's own.
func openPTY(tty int, out *os.File) (*ptyTerm, error) {
	if err := failpoint.Error(failpoint.PTYOpen); err != nil {
		return nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	m, slave, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	master, err := nonBlocking(m)
	if err != nil {
		_ = slave.Close()
		return nil, err
	}
	t := &ptyTerm{master: master, slave: slave, tty: tty, out: out,
		suspend: make(chan struct{}, 1), closing: make(chan struct{})}
	if mode, err := unix.IoctlGetTermios(tty, ioctlGetTermios); err == nil {
		_ = unix.IoctlSetTermios(int(slave.Fd()), ioctlSetTermios, mode)
	}
	t.resize()
	if t.wakeR, t.wakeW, err = os.Pipe(); err != nil {
		t.closeFiles()
		return nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	return t, nil
}

// nonBlocking replaces the master's descriptor (which pty.Open's ioctls
// leave blocking) by a non-blocking duplicate that Go's poller owns, so
// that closing it ends a read still waiting on it (a grandchild that keeps
// the terminal open past the drain timeout).
func nonBlocking(m *os.File) (*os.File, error) {
	defer m.Close()
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		return nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), nil
}

// childSys is how the command is started on the pseudo-terminal: in a
// session of its own, with it as the controlling terminal (its stdin).
func (t *ptyTerm) childSys() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
}

// started begins the terminal's work, just before the command starts (so
// that nothing it writes meets crew's terminal still cooked): crew's
// terminal raw, keystrokes across, window sizes followed.
func (t *ptyTerm) started() {
	if t == nil {
		return
	}
	t.acquire()
	t.winch = make(chan os.Signal, 1)
	signal.Notify(t.winch, syscall.SIGWINCH)
	t.tstp = make(chan os.Signal, 1)
	signal.Notify(t.tstp, syscall.SIGTSTP)
	t.done.Add(2)
	go t.input()
	go t.watchSignals()
}

// acquire puts crew's terminal in raw mode (so every keystroke, Ctrl-C
// and Ctrl-Z included, goes to the command's terminal) and takes the
// window's size again, which may have changed while crew was stopped.
func (t *ptyTerm) acquire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.saved != nil || foregroundGroup(t.tty) != unix.Getpgrp() {
		return // a job in the background leaves the terminal's mode alone
	}
	mode, err := unix.IoctlGetTermios(t.tty, ioctlGetTermios)
	if err != nil {
		return
	}
	raw := *mode
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if unix.IoctlSetTermios(t.tty, ioctlSetTermios, &raw) == nil {
		t.saved = mode
	}
	t.resize()
}

// release gives crew's terminal its mode back (whoever takes the terminal
// next, the shell included, gets it as it was). Harmless twice. crew may
// be in the background by then (a stopped job), hence no SIGTTOU.
func (t *ptyTerm) release() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.saved == nil {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetTermios(t.tty, ioctlSetTermios, t.saved)
	t.saved = nil
}

// resize gives the pseudo-terminal crew's terminal's size; the kernel
// tells the command's foreground group (SIGWINCH) if it changed.
func (t *ptyTerm) resize() {
	ws, err := pty.GetsizeFull(t.out)
	if err != nil {
		return
	}
	size := unix.Winsize{Row: ws.Rows, Col: ws.Cols, Xpixel: ws.X, Ypixel: ws.Y}
	if sc, err := t.master.SyscallConn(); err == nil {
		_ = sc.Control(func(fd uintptr) { _ = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &size) })
	}
}

// watchSignals follows crew's window's size, and takes a SIGTSTP sent to
// crew for a Ctrl-Z.
func (t *ptyTerm) watchSignals() {
	defer t.done.Done()
	for {
		select {
		case <-t.winch:
			t.resize()
		case <-t.tstp:
			// Not from the keyboard (crew's terminal is raw): someone's
			// kill. Stopped as it is, crew would leave its terminal raw.
			t.requestSuspend()
		case <-t.closing:
			return
		}
	}
}

// input copies what is typed on crew's terminal to the command's, while
// crew is in its terminal's foreground (in the background a read would
// take the shell's input, or stop crew with SIGTTIN).
//
// It reads one byte at a time, so that what it has not read is still in
// crew's terminal for whoever reads it next: after an interrupt or quit
// character it reads nothing more for interruptPause, so that a line typed
// right after Ctrl-C is the shell's once the interrupted command has ended
// (on a terminal the kernel would have kept it so); a command that lives on
// gets it then. After a suspend character it waits to be rung: the job
// stops, and continues later.
func (t *ptyTerm) input() {
	defer t.done.Done()
	var b [1]byte
	for {
		if !t.await() {
			return
		}
		n, err := unix.Read(t.tty, b[:])
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if n <= 0 {
			return // crew's terminal hung up
		}
		kind := t.signalChar(b[0])
		if kind == suspendChar {
			t.requestSuspend()
			t.pause(-1)
			continue
		}
		if _, err := t.master.Write(b[:]); err != nil {
			return
		}
		if kind == interruptChar {
			t.pause(interruptPause)
		}
	}
}

// interruptPause is how long crew reads no keystrokes after an interrupt
// or quit character (see input). Not a deadline of any kind: a command
// that outlives its Ctrl-C gets what was typed meanwhile, only later.
const interruptPause = time.Second

// await waits until crew's terminal has input for a foreground crew;
// false when the terminal is closing.
func (t *ptyTerm) await() bool {
	for {
		select {
		case <-t.closing:
			return false
		default:
		}
		fds := []unix.PollFd{{Fd: int32(t.wakeR.Fd()), Events: unix.POLLIN}}
		if foregroundGroup(t.tty) == unix.Getpgrp() {
			fds = append(fds, unix.PollFd{Fd: int32(t.tty), Events: unix.POLLIN})
		}
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return false
		}
		if fds[0].Revents != 0 {
			if !t.drainWake() {
				return false
			}
			continue
		}
		if len(fds) == 2 && fds[1].Revents != 0 { // input, or a hang-up the read will tell
			return true
		}
	}
}

// pause waits until the input loop is rung (continued, closing) or d has
// passed (d < 0: no limit).
func (t *ptyTerm) pause(d time.Duration) {
	fds := []unix.PollFd{{Fd: int32(t.wakeR.Fd()), Events: unix.POLLIN}}
	ms := -1
	if d >= 0 {
		ms = int(d / time.Millisecond)
	}
	for {
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue // a signal for crew (SIGWINCH, SIGCONT) is no reason to go on
		}
		if n > 0 {
			t.drainWake() // the loop sees a closing terminal at its next wait
		}
		return
	}
}

// drainWake empties the wake pipe; false when the terminal is closing.
func (t *ptyTerm) drainWake() bool {
	var b [64]byte
	_, _ = unix.Read(int(t.wakeR.Fd()), b[:])
	select {
	case <-t.closing:
		return false
	default:
		return true
	}
}

// wake rings the input loop: crew was continued, or the terminal closes.
func (t *ptyTerm) wake() { _, _ = t.wakeW.Write([]byte{0}) }

// Special characters of the command's terminal, as its mode says now.
const (
	plainChar = iota
	interruptChar
	suspendChar
)

// signalChar says whether b is a character the command's terminal turns
// into a signal (its mode has ISIG): an interrupt or quit character, which
// the terminal itself carries out, or its suspend character, which crew
// must carry out (see ptyTerm).
func (t *ptyTerm) signalChar(b byte) int {
	sc, err := t.master.SyscallConn()
	if err != nil {
		return plainChar
	}
	var mode *unix.Termios
	_ = sc.Control(func(fd uintptr) { mode, err = unix.IoctlGetTermios(int(fd), ioctlGetTermios) })
	if err != nil || mode == nil || mode.Lflag&unix.ISIG == 0 || b == vdisable {
		return plainChar
	}
	switch b {
	case mode.Cc[unix.VSUSP]:
		if fg := t.foreground(); fg > 0 && fg != int(t.pgid.Load()) {
			// Another group of the command's session has its terminal
			// (a shell's job): the kernel stops that one itself.
			return plainChar
		}
		return suspendChar
	case mode.Cc[unix.VINTR], mode.Cc[unix.VQUIT]:
		return interruptChar
	}
	return plainChar
}

// foreground is the command's terminal's foreground group (0: unknown).
func (t *ptyTerm) foreground() int {
	sc, err := t.master.SyscallConn()
	if err != nil {
		return 0
	}
	fg := 0
	_ = sc.Control(func(fd uintptr) { fg, _ = unix.IoctlGetInt(int(fd), unix.TIOCGPGRP) })
	return fg
}

func (t *ptyTerm) requestSuspend() {
	select {
	case t.suspend <- struct{}{}:
	default:
	}
}

// resume takes crew's terminal again once crew's job is continued (fg or
// bg): raw if crew has the terminal's foreground, and keystrokes again.
func (t *ptyTerm) resume(foreground bool) {
	if foreground {
		t.acquire()
	}
	t.wake()
}

// suspended delivers the suspend requests (nil without a terminal).
func (t *ptyTerm) suspended() <-chan struct{} {
	if t == nil {
		return nil
	}
	return t.suspend
}

// close ends the terminal's work as soon as the command has exited:
// keystrokes stay in crew's terminal for the shell. crew's terminal stays
// raw until release, once the rest of the command's output is written as
// it was (cooked, "\r\n" would become "\r\r\n"). The master is the
// output's, which drains and closes it; a write of keystrokes left blocked
// on it (a command that did not read them, a grandchild that keeps its
// terminal) is ended by a deadline instead.
func (t *ptyTerm) close() {
	if t == nil {
		return
	}
	select {
	case <-t.closing:
		return
	default:
	}
	close(t.closing)
	_ = t.master.SetWriteDeadline(time.Now())
	if t.winch != nil {
		signal.Stop(t.winch)
		signal.Stop(t.tstp)
		t.wake()
		t.done.Wait()
	}
	_ = t.wakeR.Close()
	_ = t.wakeW.Close()
}

// closeFiles releases a terminal that was never used.
func (t *ptyTerm) closeFiles() {
	_ = t.master.Close()
	_ = t.slave.Close()
}
