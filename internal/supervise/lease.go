package supervise

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
)

// A run whose slot is a lease (an etcd store) runs each attempt of its
// command under a lease guard (backend.Guard, package leaseguard): the
// guard leads the command's process group and kills it before the lease
// can have expired, whatever happens to this supervisor. For the
// supervisor, losing the lease is one more reason to stop the command, as
// crew stop is: SIGTERM, then SIGKILL when the lease's time is up.
//
// The guard must never be stopped (SIGSTOP) with the command, or nothing
// would kill the group in time: a leased command therefore never gets a
// pseudo-terminal or the terminal's foreground (Ctrl-Z there would stop
// the guard's whole group); it runs as a background job of crew's.

// crewFault is a launch that failed for crew's own reasons (its guard),
// not the command's: the run fails with 125, as any internal error.
type crewFault struct{ err error }

func (e *crewFault) Error() string { return e.err.Error() }
func (e *crewFault) Unwrap() error { return e.err }

// guarding is a run's lease and the guard of its current attempt.
type guarding struct {
	lease backend.Lease // nil: the slot cannot run out
	g     backend.Guard // the running attempt's guard, if one runs
	// end says why the lease ended the run, if it did.
	end string
}

// guardingOf is run's lease, if its slot is one.
func guardingOf(run backend.Run) guarding {
	if run == nil {
		return guarding{}
	}
	return guarding{lease: run.Claim().Lease()}
}

// leased reports whether the run's slot can run out.
func (lg *guarding) leased() bool { return lg.lease != nil }

// fresh reports whether an attempt may start: always, unless the slot is a
// lease that could run out while the command is being started.
func (lg *guarding) fresh() bool { return lg.lease == nil || lg.lease.Fresh() }

// awaitFresh waits until the lease is fresh (a renewal missed just before
// the launch), or fails once it is known gone.
func (lg *guarding) awaitFresh() error {
	for !lg.fresh() {
		select {
		case <-lg.expired():
			return &crewFault{errors.New("the run's lease expired before its command could start (etcd did not answer)")}
		case <-time.After(leasePollInterval):
		}
	}
	return nil
}

// running reports whether an attempt's guard runs.
func (lg *guarding) running() bool { return lg.g != nil }

// start starts an attempt's guard; the command is started into its group
// (sys).
func (lg *guarding) start(sys *syscall.SysProcAttr) error {
	g, err := lg.lease.Guard()
	if err != nil {
		return &crewFault{fmt.Errorf("start the lease guard: %w", err)}
	}
	lg.g = g
	sys.Pgid = g.Pgid()
	return nil
}

// confirm checks that the guard was alive when the command joined its
// group; if not, the command must be killed: nothing would stop it with
// the lease.
func (lg *guarding) confirm() error {
	if err := lg.g.Confirm(); err != nil {
		return &crewFault{fmt.Errorf("the lease guard did not confirm the command's group (%v); killed the command's group", err)}
	}
	return nil
}

// stop ends the attempt's guard, and with it whatever the command left in
// its group: no process of the run outlives its lease.
func (lg *guarding) stop(warn func(error), id record.RunID) {
	if lg.g == nil {
		return
	}
	if err := lg.g.End(); err != nil {
		warn(fmt.Errorf("the lease guard of run %s: %w", id, err))
	}
	lg.g = nil
}

// losing delivers the guard's word that the lease is running out (never,
// without a guard).
func (lg *guarding) losing() <-chan backend.LeaseLoss {
	if lg.g == nil {
		return nil
	}
	return lg.g.Losing()
}

// expired is closed once the lease is known gone (never, without one).
func (lg *guarding) expired() <-chan struct{} {
	if lg.lease == nil {
		return nil
	}
	return lg.lease.Expired()
}

// overdue notes a command the guard killed because the lease's deadline
// passed while this process could not act (it was frozen): the lease, not
// the command, ended the attempt.
func (lg *guarding) overdue(ws syscall.WaitStatus) {
	if lg.g == nil || lg.end != "" || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return
	}
	lg.end = lg.g.Overdue()
}

// members are the processes of the command's group that are crew's own,
// besides the command: its guard, which leads the group.
func (lg *guarding) members() []int {
	if lg.g == nil {
		return nil
	}
	return []int{lg.g.PID()}
}

// ended is the warning a run ended by its lease leaves the user.
func (lg *guarding) ended() error {
	if lg.end == "" {
		return nil
	}
	return errors.New(lg.end)
}

// leaseLost stops the command because its lease is running out: SIGTERM
// now, SIGKILL when the lease's time is up (at once if it is). A stop
// under way keeps its signal, but not a grace period longer than that.
func (l *waitLoop) leaseLost(loss backend.LeaseLoss) {
	s := l.s
	s.lg.end = loss.Reason
	if l.stop.mayBeTakenOver() {
		l.begin(&stopRecord{sig: syscall.SIGTERM, grace: loss.Within})
		s.signalGroup(syscall.SIGTERM)
		s.signalGroup(syscall.SIGCONT)
	} else if time.Until(l.graceAt) > loss.Within {
		l.grace, l.graceAt = time.After(loss.Within), time.Now().Add(loss.Within)
	}
	if loss.Within <= 0 {
		l.graceOver()
	}
}
