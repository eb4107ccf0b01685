//go:build linux

package runstore

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// notifier wakes a StopWatch when a file is renamed into owners/ (a stop
// request is written as a temporary file, then renamed), so an idle
// supervisor sleeps in a read instead of waking up to poll.
type notifier struct {
	f       *os.File // the inotify descriptor
	changed chan struct{}
}

// newNotifier watches the directory dir; nil if inotify is unavailable
// (such as past fs.inotify.max_user_instances), and the caller polls.
func newNotifier(dir *os.Root) *notifier {
	d, err := dir.Open(".")
	if err != nil {
		return nil
	}
	defer d.Close()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	// Through the open directory, not its path: nothing is looked up again.
	if _, err := unix.InotifyAddWatch(fd, fmt.Sprintf("/proc/self/fd/%d", d.Fd()), unix.IN_MOVED_TO); err != nil {
		_ = unix.Close(fd)
		return nil
	}
	n := &notifier{f: os.NewFile(uintptr(fd), "inotify"), changed: make(chan struct{}, 1)}
	go n.listen()
	return n
}

// listen turns inotify events into wake-ups until the descriptor closes.
func (n *notifier) listen() {
	buf := make([]byte, 4096)
	for {
		if _, err := n.f.Read(buf); err != nil {
			return
		}
		select {
		case n.changed <- struct{}{}:
		default:
		}
	}
}

func (n *notifier) close() { _ = n.f.Close() }
