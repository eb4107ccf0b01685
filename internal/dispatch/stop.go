package dispatch

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/proc"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

const (
	// ackTimeout is how long a living supervisor has to take up a stop
	// request (it looks every 150 ms) before crew stop acts itself.
	ackTimeout = 2 * time.Second
	// settleTimeout is how long a supervisor that took up the request
	// has, beyond the grace period, to record the run (its command's
	// output drains for up to 2 s, then three fsyncs).
	settleTimeout = 10 * time.Second
	// killTimeout bounds the wait for a run to end after SIGKILL.
	killTimeout = 30 * time.Second
)

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fmt.Sprintf("uid %d", os.Getuid())
}

// newStopRequest is the request crew stop writes, at now.
func newStopRequest(now time.Time, opts vocab.StopOptions) *record.StopRequest {
	return &record.StopRequest{PID: os.Getpid(), User: currentUser(), Signal: vocab.SignalName(opts.Signal),
		Signo: int(opts.Signal), At: now, Grace: opts.Grace.String()}
}

// Stop stops a run and returns its final record. crew stop never signals
// a pid or process group it read from a file. It writes a stop request;
// a living supervisor (foreground or detached) carries it out on its own
// command's group — which it provably owns, having not reaped the leader
// — sending the signal, SIGCONT, and SIGKILL after the grace period, and
// records the run. When there is no supervisor (an orphan), or it does
// not take the request up in time (stopped, hung), crew stop signals the
// processes the kernel shows holding the run's owner lock itself (Linux:
// /proc and pidfds), and refuses where it cannot prove which they are.
// Only the run's own user or root may stop a living run (rights.go): for
// anyone else nothing is written or signalled (*NotPermittedError).
func (d *Dispatcher) Stop(id record.RunID, opts vocab.StopOptions) (*record.Run, error) {
	if _, leased := d.Store.(backend.Leases); leased && opts.Signal == syscall.SIGSTOP {
		return nil, &vocab.RefusedOnStoreError{What: "crew stop --signal SIGSTOP", Where: d.Store.Where(),
			Why: "it would freeze the run's lease guard with the command, and nothing would stop the command when its lease runs out; use SIGTSTP to pause a command"}
	}
	st := d.parts()
	rec, err := st.ReadRun(id)
	if err != nil {
		return nil, err
	}
	if !rec.State.Active() {
		return rec, nil
	}
	o := st.OwnerState(id, rec.Locks)
	if o.Owner == record.Dead {
		// Nobody works on it: it only needs finalizing.
		if _, _, err := st.FinalizeDead(id, d.now()); err != nil {
			return nil, err
		}
		return st.ReadRun(id)
	}
	if err := d.mayStopRun(rec); err != nil {
		return nil, err
	}
	x := &stopper{d: d, id: id, req: newStopRequest(d.now(), opts), opts: opts}
	if err := st.WriteStopRequest(id, x.req); err != nil {
		return nil, err
	}
	why := "its supervisor is gone"
	if o.Supervisor.MayLive() {
		final, reason := x.awaitSupervisor(opts.Grace)
		if final != nil {
			return final, nil
		}
		why = reason
	}
	return x.stopDirectly(why)
}

// stopper is one crew stop of a run under way: the request it wrote.
type stopper struct {
	d    *Dispatcher
	id   record.RunID
	req  *record.StopRequest
	opts vocab.StopOptions
}

// awaitSupervisor waits for the run's supervisor to take up the stop
// request and record the run. It returns the final record, or why crew
// stop must act itself.
func (x *stopper) awaitSupervisor(grace time.Duration) (*record.Run, string) {
	d, id := x.d, x.id
	st := d.parts()
	start := time.Now()
	var acked time.Time
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		if final := x.finalIfOver(); final != nil {
			return final, ""
		}
		if st.OwnerState(id, lockIDsOf(st, id)).Supervisor == record.Dead {
			if final := x.finalIfOver(); final != nil {
				return final, "" // it recorded the run as it let go
			}
			return nil, "its supervisor died before recording the run"
		}
		if cur := st.ReadStopRequest(id); acked.IsZero() && cur != nil && cur.Ack != nil {
			acked = time.Now()
		}
		switch {
		case acked.IsZero() && time.Since(start) > ackTimeout:
			return nil, fmt.Sprintf("its supervisor did not take up the stop request within %s", ackTimeout)
		case !acked.IsZero() && time.Since(acked) > grace+settleTimeout:
			return nil, fmt.Sprintf("its supervisor took up the stop request but has not recorded the run %s after the grace period", settleTimeout)
		}
		time.Sleep(delay)
	}
}

// stopDirectly signals the run's command processes itself, as the kernel
// shows them, then SIGKILL after the grace period, and returns the final
// record: its own (FinalizeStopped) for an orphan, the supervisor's
// otherwise. why says why the supervisor did not do it.
func (x *stopper) stopDirectly(why string) (*record.Run, error) {
	d, id, req, opts := x.d, x.id, x.req, x.opts
	if _, ok := d.procs(); !ok {
		return nil, &vocab.StopError{Err: fmt.Errorf("run %s: %s, and its processes may be on another host, where crew stop cannot signal them: "+
			"nothing was signalled; the stop request stays for its supervisor, and if that is gone, the run's slot frees with its lease", id, why)}
	}
	t, err := x.findRunProcs()
	if errors.Is(err, proc.ErrUnsupported) {
		return nil, &vocab.StopError{Err: fmt.Errorf("run %s: %s, and %w: nothing was signalled; the stop request stays for its supervisor, if it lives", id, why, err)}
	}
	if err != nil {
		return nil, &vocab.StopError{Err: fmt.Errorf("run %s: %s, and its processes cannot be found: %w", id, why, err)}
	}
	defer t.close()
	if len(t.cmd) == 0 {
		if final := x.finalIfOver(); final != nil {
			return final, nil // it ended meanwhile
		}
		err := fmt.Errorf("run %s: %s; %s; %w", id, why, t.supervisorState(), t.noneProven())
		if len(t.supervisors) > 0 {
			err = fmt.Errorf("%w; the stop request stays, and the supervisor carries it out when it goes on", err)
		}
		return nil, &vocab.StopError{Err: err}
	}
	t.signal(opts.Signal)
	req.Targets = t.targets()
	_ = d.runs().WriteStopRequest(id, req) // what was signalled, for the record
	return x.awaitDirect(opts.Grace, t, why)
}

// awaitDirect waits for a run whose processes crew stop signalled to end,
// sending SIGKILL to them (and to any that appeared since) after the grace
// period.
func (x *stopper) awaitDirect(grace time.Duration, t *runProcs, why string) (*record.Run, error) {
	d, id, req := x.d, x.id, x.req
	graceOver := time.After(grace)
	deadline := time.Now().Add(grace + killTimeout)
	var gone time.Time // when the last command process was seen gone
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		if final := x.finalIfOver(); final != nil {
			return final, nil
		}
		if gone.IsZero() && !t.holding() {
			gone = time.Now()
		}
		if !gone.IsZero() && time.Since(gone) > ackTimeout {
			// Only a supervisor that does not answer still holds the run.
			return nil, &vocab.StopError{Err: fmt.Errorf("run %s: %s, so crew stop signalled %s itself; they are gone, but %s",
				id, why, t.targets(), t.supervisorState())}
		}
		select {
		case <-graceOver:
			graceOver = nil
			_ = t.rescan()
			t.signal(syscall.SIGKILL)
			req.Killed, req.Targets = true, t.targets()
			_ = d.runs().WriteStopRequest(id, req)
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			return nil, &vocab.StopError{Err: fmt.Errorf("run %s did not end within %s after SIGKILL", id, killTimeout)}
		}
	}
}

// finalIfOver returns the run's final record once there is one: written by
// its supervisor, or, when every process of the run is gone and no
// supervisor lived to say so, by this crew stop.
func (x *stopper) finalIfOver() *record.Run {
	d, id, req := x.d, x.id, x.req
	st := d.parts()
	cur, err := st.ReadRun(id)
	if err == nil && !cur.State.Active() {
		return cur
	}
	if err != nil || st.OwnerState(id, cur.Locks).Owner != record.Dead {
		return nil
	}
	// Every process of the run is gone. If a supervisor lived, it is
	// finalizing right now (and holds the fence); otherwise it is ours to
	// record.
	outcome, rec, err := st.FinalizeStopped(id, req, d.now())
	if err != nil || outcome == backend.OwnerBusy {
		return nil
	}
	if rec == nil {
		rec, _ = st.ReadRun(id)
		return rec
	}
	d.RingWaiters()
	return rec
}

// lockIDsOf is the lock files a run's record names, if it can be read.
func lockIDsOf(st backend.Runs, id record.RunID) *record.LockIDs {
	if rec, err := st.ReadRun(id); err == nil {
		return rec.Locks
	}
	return nil
}
