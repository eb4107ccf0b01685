package dispatch

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/recovery"
	"github.com/crew-dev/crew/internal/supervise"
)

// StopError is a stop that could not be carried out.
type StopError struct{ Err error }

func (e *StopError) Error() string { return e.Err.Error() }
func (e *StopError) Unwrap() error { return e.Err }

// StopOptions configures Stop.
type StopOptions struct {
	Signal syscall.Signal
	Grace  time.Duration
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fmt.Sprintf("uid %d", os.Getuid())
}

// Stop signals a run's process group, waits up to the grace period, then
// sends SIGKILL, and returns the run's final record. It works whether the
// run's supervisor lives (foreground or detached: the supervisor records
// the stop) or is gone and only the command lives (an orphan: Stop records
// it itself once the command's last process has exited).
func (d *Dispatcher) Stop(id record.RunID, opts StopOptions) (*record.Run, error) {
	st := d.Store
	rec, err := st.ReadRun(id)
	if err != nil {
		return nil, err
	}
	if !rec.State.Active() {
		return rec, nil
	}
	if st.OwnerState(id, rec.Locks).Owner == record.Dead {
		// Nobody works on it: it only needs finalizing.
		if _, _, err := recovery.FinalizeDead(st, id, d.now()); err != nil {
			return nil, err
		}
		return st.ReadRun(id)
	}
	req := &record.StopRequest{PID: os.Getpid(), User: currentUser(), Signal: supervise.SignalName(opts.Signal), At: d.now(), Grace: opts.Grace.String()}
	if err := st.WriteStopRequest(id, req); err != nil {
		return nil, err
	}
	target := rec.PGID
	if target == 0 {
		// Not started yet (or its start was not recorded): stop the
		// supervisor, which then records the run as stopped.
		if st.OwnerState(id, rec.Locks).Supervisor != record.Alive {
			return nil, &StopError{Err: fmt.Errorf("run %s has no recorded process group and no living supervisor; wait for it to finish or run crew recover", id)}
		}
		if err := syscall.Kill(rec.SupervisorPID, opts.Signal); err != nil {
			return nil, &StopError{Err: fmt.Errorf("signal supervisor %d of run %s: %w", rec.SupervisorPID, id, err)}
		}
	} else if err := syscall.Kill(-target, opts.Signal); err != nil && !errors.Is(err, syscall.ESRCH) {
		return nil, &StopError{Err: fmt.Errorf("signal process group %d of run %s: %w", target, id, err)}
	}
	return d.awaitStopped(id, rec, req, opts.Grace)
}

// awaitStopped waits for a signalled run to end, sending SIGKILL after the
// grace period. The run is over when its record is final and no process of
// its group is left: a grandchild that ignored the signal gets SIGKILL
// after the grace period like the rest, even if the record was final
// before.
func (d *Dispatcher) awaitStopped(id record.RunID, rec *record.Run, req *record.StopRequest, grace time.Duration) (*record.Run, error) {
	st := d.Store
	target := rec.PGID
	graceOver := time.After(grace)
	deadline := time.Now().Add(grace + 30*time.Second)
	var final *record.Run
	groupGone := func() bool { return target == 0 || syscall.Kill(-target, 0) == syscall.ESRCH }
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		if final == nil {
			final = d.finalIfOver(id, rec.Locks, req)
		}
		if final != nil && (groupGone() || graceOver == nil) {
			return final, nil
		}
		select {
		case <-graceOver:
			graceOver = nil
			req.Killed = true
			if final == nil {
				_ = st.WriteStopRequest(id, req)
			}
			if target != 0 {
				_ = syscall.Kill(-target, syscall.SIGKILL)
			} else {
				_ = syscall.Kill(rec.SupervisorPID, syscall.SIGKILL)
			}
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			return nil, &StopError{Err: fmt.Errorf("run %s did not end within %s after SIGKILL", id, 30*time.Second)}
		}
	}
}

// finalIfOver returns the run's final record once there is one: written by
// its supervisor, or, when every process of the run is gone and no
// supervisor lived to say so, by this crew stop.
func (d *Dispatcher) finalIfOver(id record.RunID, want *record.LockIDs, req *record.StopRequest) *record.Run {
	st := d.Store
	if cur, err := st.ReadRun(id); err == nil && !cur.State.Active() {
		return cur
	}
	if st.OwnerState(id, want).Owner != record.Dead {
		return nil
	}
	// Every process of the run is gone. If a supervisor lived, it is
	// finalizing right now (and holds the fence); otherwise it is ours to
	// record.
	outcome, rec, err := recovery.FinalizeStopped(st, id, req, d.now())
	if err != nil || outcome == recovery.OwnerBusy {
		return nil
	}
	if rec == nil {
		rec, _ = st.ReadRun(id)
		return rec
	}
	d.RingWaiters()
	return rec
}

// StopWaiter tells a waiting start (a queue ticket, not yet a run) to
// leave the queue, by signalling its process. It reports whether id was a
// waiting start. The ticket's lock proves the process is alive, and the
// waiter never forks, so the pid cannot belong to anyone else.
func (d *Dispatcher) StopWaiter(id record.RunID, sig syscall.Signal) (bool, error) {
	st := d.Store
	if _, err := st.ReadRun(id); err == nil {
		return false, nil
	}
	entries, err := st.ListTickets()
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if e.ID != id || e.Ticket == nil {
			continue
		}
		if e.Waiter != record.Alive {
			return false, nil
		}
		if err := syscall.Kill(e.Ticket.PID, sig); err != nil {
			return true, &StopError{Err: fmt.Errorf("signal waiting start %s (pid %d): %w", id, e.Ticket.PID, err)}
		}
		return true, nil
	}
	return false, nil
}
