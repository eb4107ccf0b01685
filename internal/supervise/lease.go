package supervise

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/backend"
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

// leased is the run's lease, nil if its slot cannot run out.
func (s *supervisor) leased() backend.Lease {
	if s.Run == nil {
		return nil
	}
	return s.Run.Claim().Lease()
}

// startGuard starts the attempt's lease guard; the command is started
// into its group (sys).
func (s *supervisor) startGuard(lease backend.Lease, sys *syscall.SysProcAttr) error {
	g, err := lease.Guard()
	if err != nil {
		return &crewFault{fmt.Errorf("start the lease guard: %w", err)}
	}
	s.guard = g
	sys.Pgid = g.Pgid()
	return nil
}

// confirmGuard checks that the guard was alive when the command joined its
// group; if not, the command is killed: nothing would stop it with the
// lease.
func (s *supervisor) confirmGuard() error {
	if err := s.guard.Confirm(); err != nil {
		return &crewFault{fmt.Errorf("the lease guard did not confirm the command's group (%v); killed the command", err)}
	}
	return nil
}

// endGuard ends the attempt's guard, and with it whatever the command
// left in its group: no process of the run outlives its lease.
func (s *supervisor) endGuard() {
	if s.guard == nil {
		return
	}
	if err := s.guard.End(); err != nil {
		s.Warn(fmt.Errorf("the lease guard of run %s: %w", s.rec.RunID, err))
	}
	s.guard = nil
}

// losing delivers the guard's word that the lease is running out (never,
// without a guard).
func (s *supervisor) losing() <-chan backend.LeaseLoss {
	if s.guard == nil {
		return nil
	}
	return s.guard.Losing()
}

// leaseLost stops the command because its lease is running out: SIGTERM
// now, SIGKILL when the lease's time is up (at once if it is). A stop
// under way keeps its signal, but not a grace period longer than that.
func (l *waitLoop) leaseLost(loss backend.LeaseLoss) {
	s := l.s
	s.leaseEnd = loss.Reason
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

// overdue notes a command the guard killed because the lease's deadline
// passed while this process could not act (it was frozen): the lease, not
// the command, ended the attempt.
func (s *supervisor) overdue(ws syscall.WaitStatus) {
	if s.guard == nil || s.leaseEnd != "" || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return
	}
	s.leaseEnd = s.guard.Overdue()
}

// signalGuarded signals the command's group through its guard; if the
// guard is gone, the command itself, which is still crew's unreaped child.
func (s *supervisor) signalGuarded(sig syscall.Signal) {
	if err := s.guard.Signal(sig); err != nil && s.cmd != nil && !s.cmd.reaped {
		_ = unix.Kill(s.cmd.pid, sig)
	}
}

// leaseEnded is the warning a run ended by its lease leaves the user.
func (s *supervisor) leaseEnded() error {
	if s.leaseEnd == "" {
		return nil
	}
	return errors.New(s.leaseEnd)
}
