package dispatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/runstore"
)

// stopRequest is left by `crew stop` so that whoever finalizes the run
// says who stopped it.
type stopRequest struct {
	PID    int       `json:"pid"`
	User   string    `json:"user"`
	Signal string    `json:"signal"`
	At     time.Time `json:"at"`
	Killed bool      `json:"killed"` // SIGKILL after the grace period
	Grace  string    `json:"grace"`
}

func (r *stopRequest) describe(pgid int) string {
	s := fmt.Sprintf("stopped by crew stop (pid %d, user %s), which sent %s to process group %d", r.PID, r.User, r.Signal, pgid)
	if r.Killed {
		s += fmt.Sprintf(" and SIGKILL after the %s grace period", r.Grace)
	}
	return s
}

func (d *Dispatcher) readStopRequest(id runstore.RunID) *stopRequest {
	data, err := os.ReadFile(d.Store.StopRequestPath(id))
	if err != nil {
		return nil
	}
	var r stopRequest
	if json.Unmarshal(data, &r) != nil {
		return nil
	}
	return &r
}

func (d *Dispatcher) writeStopRequest(id runstore.RunID, r *stopRequest) error {
	b, _ := json.Marshal(r)
	return runstore.WriteDurable(d.Store.StopRequestPath(id), b)
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fmt.Sprintf("uid %d", os.Getuid())
}

// StopError is a stop that could not be carried out.
type StopError struct{ Msg string }

func (e *StopError) Error() string { return e.Msg }

// StopOptions configures Stop.
type StopOptions struct {
	Signal syscall.Signal
	Grace  time.Duration
}

// Stop signals a run's process group, waits up to the grace period, then
// sends SIGKILL, and returns the run's final record. It works whether the
// run's supervisor lives (foreground or detached: the supervisor records
// the stop) or is gone and only the command lives (an orphan: Stop records
// it itself once the command's last process has exited).
func (d *Dispatcher) Stop(id runstore.RunID, opts StopOptions) (*runstore.Record, error) {
	st := d.Store
	rec, err := st.ReadRun(id)
	if err != nil {
		return nil, err
	}
	if !rec.State.Active() {
		return rec, nil
	}
	ownerHeld, _ := lockfs.Probe(st.OwnerLockPath(id))
	if !ownerHeld {
		// Nobody works on it: it only needs finalizing.
		if _, _, err := d.finalizeDead(id); err != nil {
			return nil, err
		}
		return st.ReadRun(id)
	}
	req := &stopRequest{PID: os.Getpid(), User: currentUser(), Signal: signalName(opts.Signal), At: d.now(), Grace: opts.Grace.String()}
	if err := d.writeStopRequest(id, req); err != nil {
		return nil, err
	}
	target := rec.PGID
	if target == 0 {
		// Not started yet (or its start was not recorded): stop the
		// supervisor, which then records the run as stopped.
		if held, _ := lockfs.Probe(st.SupervisorLockPath(id)); !held {
			return nil, &StopError{Msg: fmt.Sprintf("run %s has no recorded process group and no living supervisor; wait for it to finish or run crew recover", id)}
		}
		if err := syscall.Kill(rec.SupervisorPID, opts.Signal); err != nil {
			return nil, &StopError{Msg: fmt.Sprintf("signal supervisor %d of run %s: %v", rec.SupervisorPID, id, err)}
		}
	} else if err := syscall.Kill(-target, opts.Signal); err != nil && !errors.Is(err, syscall.ESRCH) {
		return nil, &StopError{Msg: fmt.Sprintf("signal process group %d of run %s: %v", target, id, err)}
	}

	graceOver := time.After(opts.Grace)
	deadline := time.Now().Add(opts.Grace + 30*time.Second)
	// The run is over when its record is final and no process of its group
	// is left: a grandchild that ignored the signal gets SIGKILL after the
	// grace period like the rest, even if the record was final before.
	var final *runstore.Record
	groupGone := func() bool { return target == 0 || syscall.Kill(-target, 0) == syscall.ESRCH }
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		if final == nil {
			if cur, err := st.ReadRun(id); err == nil && !cur.State.Active() {
				final = cur
			} else if held, _ := lockfs.Probe(st.OwnerLockPath(id)); !held {
				// Every process of the run is gone. If a supervisor lived,
				// it is finalizing right now; otherwise it is ours to record.
				if cur, ok := d.finalizeStoppedOrphan(id, req); ok {
					final = cur
				}
			}
		}
		if final != nil && (groupGone() || graceOver == nil) {
			return final, nil
		}
		select {
		case <-graceOver:
			graceOver = nil
			req.Killed = true
			if final == nil {
				_ = d.writeStopRequest(id, req)
			}
			if target != 0 {
				_ = syscall.Kill(-target, syscall.SIGKILL)
			} else {
				_ = syscall.Kill(rec.SupervisorPID, syscall.SIGKILL)
			}
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			return nil, &StopError{Msg: fmt.Sprintf("run %s did not end within %s after SIGKILL", id, 30*time.Second)}
		}
	}
}

// finalizeStoppedOrphan records a run whose supervisor was already gone
// as stopped, under the run's fence. It reports false if someone else
// holds the fence (a supervisor finalizing it), so the caller looks again.
func (d *Dispatcher) finalizeStoppedOrphan(id runstore.RunID, req *stopRequest) (*runstore.Record, bool) {
	st := d.Store
	f, err := d.takeFence(id)
	if errors.Is(err, errFenceDone) {
		rec, err := st.ReadRun(id)
		return rec, err == nil
	}
	if err != nil {
		return nil, false
	}
	rec, err := st.ReadRecord(st.ActivePath(id))
	if err != nil || st.IsDone(id) {
		f.release()
		return nil, false
	}
	if rec.State.Active() {
		now := d.now()
		rec.State = runstore.Stopped
		rec.Signal = req.Signal
		rec.FinishedAt = &now
		rec.ExitCode = nil
		rec.Reason = fmt.Sprintf("%s; its supervisor (pid %d) was already gone, so the command's exit status is unknown",
			req.describe(rec.PGID), rec.SupervisorPID)
		rec.AddEvent(now, "%s", finalEvent(rec))
	}
	if err := st.WriteDone(rec); err != nil {
		f.release()
		return nil, false
	}
	_ = st.RemoveActive(id)
	_ = os.Remove(st.StopRequestPath(id))
	_ = f.removeAndRelease(d, id)
	d.RingWaiters()
	return rec, true
}

// StopWaiter tells a waiting start (a queue ticket, not yet a run) to
// leave the queue, by signalling its process. It reports whether id was a
// waiting start. The ticket's lock proves the process is alive, and the
// waiter never forks, so the pid cannot belong to anyone else.
func (d *Dispatcher) StopWaiter(id runstore.RunID, sig syscall.Signal) (bool, error) {
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
		if held, _ := lockfs.Probe(st.TicketLockPath(id)); !held {
			return false, nil
		}
		if err := syscall.Kill(e.Ticket.PID, sig); err != nil {
			return true, &StopError{Msg: fmt.Sprintf("signal waiting start %s (pid %d): %v", id, e.Ticket.PID, err)}
		}
		return true, nil
	}
	return false, nil
}
