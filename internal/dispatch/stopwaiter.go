package dispatch

import (
	"fmt"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/supervise"
	"github.com/crew-dev/crew/internal/vocab"
)

// waiterLeaveTimeout bounds how long crew stop waits for a waiting start
// to leave the queue once told to.
const waiterLeaveTimeout = 10 * time.Second

// StopWaiter tells a waiting start (a queue ticket, not yet a run) to
// leave the queue: it writes a stop request under the ticket's id and
// rings the waiter's bell; the waiter reads the request and exits with
// 128+signal. The pid a ticket names is never signalled: a ticket is a
// file, and files can lie. It reports whether id was a waiting start; if
// the start was admitted meanwhile it reports false, and the run (which
// sees the same request before it launches) is stopped like any other.
func (d *Dispatcher) StopWaiter(id record.RunID, sig syscall.Signal) (bool, error) {
	st := d.parts()
	if _, err := st.ReadRun(id); err == nil || !st.HasTicket(id) || st.WaiterState(id) != record.Alive {
		return false, nil
	}
	if gone, err := d.mayStopWaiter(id); gone || err != nil {
		return err != nil, err
	}
	req := newStopRequest(d.now(), vocab.StopOptions{Signal: sig})
	if err := st.WriteStopRequest(id, req); err != nil {
		return true, err
	}
	st.Ring(id)
	deadline := time.Now().Add(waiterLeaveTimeout)
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		if left, admitted := waiterGone(st, id); admitted {
			return false, nil
		} else if left {
			_ = st.RemoveStopRequest(id) // no run will ever have this id
			return true, nil
		}
		if time.Now().After(deadline) {
			return true, &vocab.StopError{Err: fmt.Errorf("the waiting start %s did not leave the queue within %s; the request stays, and it leaves when it next wakes", id, waiterLeaveTimeout)}
		}
		time.Sleep(delay)
	}
}

// waiterGone reports whether the waiter of ticket id left the queue, and
// whether it left it admitted. A run's record is written before its
// ticket goes, so a missing ticket with no record means it left without.
func waiterGone(st parts, id record.RunID) (left, admitted bool) {
	if st.HasTicket(id) && st.WaiterState(id) != record.Dead {
		return false, false
	}
	rec, err := st.ReadRun(id)
	return true, err == nil && !rec.NeverAdmitted // a background waiter leaves a record of the start that never ran
}

// stoppedWhileWaiting returns the error a waiting start leaves the queue
// with when crew stop has asked it to (its own user, or root), or nil.
func (a *admitter) stoppedWhileWaiting(w backend.Waiter) error {
	d := a.d
	req := a.stopRequestFor(w)
	if req == nil {
		return nil
	}
	if !a.keep {
		w.Remove()
	}
	_ = d.runs().RemoveStopRequest(w.ID())
	return &vocab.SignalledError{Signal: supervise.RequestedSignal(req), By: req.Who()}
}
