//go:build etcd

package fleet

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/leaseguard"
)

// GuardArg is the argument crew re-executes itself with to run a lease
// guard (leaseguard.Main).
const GuardArg = "__lease-guard"

// A run's lease is a backend.Lease: each attempt of its command runs under
// a guard of its own, which the lease tells of every renewal (Extend), and
// whose monitor tells the supervisor when the lease is running out.

// Guard starts an attempt's guard with the lease's current deadline, if
// the lease is fresh.
func (l *lease) Guard() (backend.Guard, error) {
	if !l.Fresh() {
		return nil, fmt.Errorf("the run's lease of %s was last renewed %s ago (etcd does not answer): "+
			"no attempt starts on a lease that could run out while its command is being started",
			l.ttl, l.sinceContact().Round(100*time.Millisecond))
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find crew's own executable for the lease guard: %w", err)
	}
	g, err := leaseguard.Start(leaseguard.Options{Exe: exe, Args: []string{GuardArg}, Deadline: l.deadline(), Stderr: os.Stderr})
	if err != nil {
		return nil, err
	}
	a := &attemptGuard{l: l, g: g, losing: make(chan backend.LeaseLoss, 1), stop: make(chan struct{}), done: make(chan struct{})}
	l.setGuard(a)
	_ = g.Extend(l.deadline()) // renewals that came in while the guard started
	go a.monitor()
	return a, nil
}

// Expired is closed once the lease is known gone.
func (l *lease) Expired() <-chan struct{} { return l.expired }

// attemptGuard is one attempt's guard, and the monitor that watches the
// lease for it.
type attemptGuard struct {
	l *lease
	g *leaseguard.Guard
	// gone: the guard exited before the attempt ended (someone killed
	// it); ending: the attempt is over.
	gone, ending atomic.Bool
	losing       chan backend.LeaseLoss
	stop, done   chan struct{}
	once         sync.Once
}

func (a *attemptGuard) Pgid() int                        { return a.g.Pgid() }
func (a *attemptGuard) PID() int                         { return a.g.PID() }
func (a *attemptGuard) Confirm() error                   { return a.g.Confirm() }
func (a *attemptGuard) Losing() <-chan backend.LeaseLoss { return a.losing }

// extend passes a renewal's deadline on to the guard.
func (a *attemptGuard) extend(deadline time.Duration) {
	if err := a.g.Extend(deadline); errors.Is(err, leaseguard.ErrGone) && !a.ending.Load() {
		a.gone.Store(true)
	}
}

// Signal signals the group while the guard vouches for it.
func (a *attemptGuard) Signal(sig syscall.Signal) error { return a.g.Signal(sig) }

// End ends the guard, and whatever the command left in its group.
func (a *attemptGuard) End() error {
	a.ending.Store(true)
	a.once.Do(func() { close(a.stop); <-a.done })
	a.l.setGuard(nil)
	return a.g.End()
}

// Overdue: the deadline passed, so the guard has killed the group.
func (a *attemptGuard) Overdue() string {
	if leaseguard.Monotonic() < a.l.deadline() {
		return ""
	}
	return fmt.Sprintf("no renewal of the lease for %s (this crew process was frozen or cut off from etcd); "+
		"the lease guard killed the command before its lease of %s could expire", a.l.sinceContact().Round(100*time.Millisecond), a.l.ttl)
}

// monitor tells the supervisor, once, that the command must stop: SIGTERM
// a quarter of the TTL before the deadline (the guard's SIGKILL comes at
// it), at once if the guard is gone.
func (a *attemptGuard) monitor() {
	defer close(a.done)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-tick.C:
		}
		if loss, ok := a.loss(); ok {
			a.losing <- loss
			return
		}
	}
}

// loss says whether the command must stop now, why, and how long it has.
func (a *attemptGuard) loss() (backend.LeaseLoss, bool) {
	l := a.l
	if a.gone.Load() {
		return backend.LeaseLoss{Reason: fmt.Sprintf("the run's lease guard (pid %d) exited before the command; "+
			"killed the command, which nothing would stop with the lease", a.g.PID())}, true
	}
	now, deadline := leaseguard.Monotonic(), l.deadline()
	since := l.sinceContact().Round(100 * time.Millisecond)
	switch {
	case l.lost():
		return backend.LeaseLoss{Reason: fmt.Sprintf("etcd says the run's lease of %s expired (no renewal for %s); stopped the command", l.ttl, since),
			Within: max(0, deadline-now)}, true
	case now >= deadline-l.ttl/4:
		return backend.LeaseLoss{Reason: fmt.Sprintf("lost contact with etcd for %s; stopped the command before its lease of %s could expire", since, l.ttl),
			Within: max(0, deadline-now)}, true
	}
	return backend.LeaseLoss{}, false
}
