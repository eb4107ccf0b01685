package supervise

import (
	"testing"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// signalChar follows the command's terminal's mode as it is now: its
// characters, and whether it turns them into signals at all.
func TestSignalCharFollowsTheCommandsTerminal(t *testing.T) {
	m, slave, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer slave.Close()
	master, err := nonBlocking(m)
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	term := &ptyTerm{master: master}
	mode, err := unix.IoctlGetTermios(int(slave.Fd()), ioctlGetTermios)
	if err != nil {
		t.Fatal(err)
	}
	set := func(change func(*unix.Termios)) {
		t.Helper()
		m := *mode
		change(&m)
		if err := unix.IoctlSetTermios(int(slave.Fd()), ioctlSetTermios, &m); err != nil {
			t.Fatal(err)
		}
	}
	set(func(m *unix.Termios) {
		m.Lflag |= unix.ISIG
		m.Cc[unix.VINTR], m.Cc[unix.VQUIT], m.Cc[unix.VSUSP] = 3, 28, 26
	})
	for b, want := range map[byte]int{3: interruptChar, 28: interruptChar, 26: suspendChar, 'a': plainChar, '\r': plainChar} {
		if got := term.signalChar(b); got != want {
			t.Errorf("signalChar(%q) = %d, want %d", b, got, want)
		}
	}
	set(func(m *unix.Termios) { m.Lflag |= unix.ISIG; m.Cc[unix.VSUSP] = vdisable })
	if got := term.signalChar(26); got != plainChar {
		t.Errorf("a disabled suspend character: signalChar(26) = %d", got)
	}
	if got := term.signalChar(vdisable); got != plainChar {
		t.Errorf("the disabling byte itself: signalChar(%d) = %d", vdisable, got)
	}
	set(func(m *unix.Termios) { m.Lflag &^= unix.ISIG }) // raw, as an editor sets it
	for _, b := range []byte{3, 26} {
		if got := term.signalChar(b); got != plainChar {
			t.Errorf("without ISIG: signalChar(%q) = %d, want plain", b, got)
		}
	}
}
