//go:build !linux

package supervise

import (
	"errors"

	"golang.org/x/sys/unix"
)

// seesStops: stops are not reported here (see watchChild).
const seesStops = false

// watchChild reports the command's exit. Without waitid's WNOWAIT (which
// this system's Go bindings lack) it waits with kqueue's NOTE_EXIT, which
// does not reap, so the zombie leader still pins its group's id. Stops are
// not seen here, so crew does no job control on this system. If kqueue
// fails, the only way left to see the exit is to reap it (reaped is set).
func watchChild(c *child) <-chan childEvent {
	events := make(chan childEvent, 1)
	go func() {
		defer close(events)
		if err := waitExitKqueue(c.pid); err != nil {
			c.reap()
			events <- childEvent{exited: true, reaped: true}
			return
		}
		events <- childEvent{exited: true}
	}()
	return events
}

// waitExitKqueue blocks until pid has exited, without reaping it.
func waitExitKqueue(pid int) error {
	kq, err := unix.Kqueue()
	if err != nil {
		return err
	}
	defer unix.Close(kq)
	ev := unix.Kevent_t{Ident: uint64(pid), Filter: unix.EVFILT_PROC, Flags: unix.EV_ADD | unix.EV_ONESHOT, Fflags: unix.NOTE_EXIT}
	out := make([]unix.Kevent_t, 1)
	for {
		n, err := unix.Kevent(kq, []unix.Kevent_t{ev}, out, nil)
		switch {
		case errors.Is(err, unix.ESRCH):
			return nil // exited before we asked: a zombie already
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return err
		case n == 1:
			return nil
		}
	}
}
