package supervise

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/proc"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// How often a supervisor looks for a crew stop request (one fstatat each
// time): where inotify wakes it (Linux), only as a safety net; elsewhere
// often enough that crew stop hears back well within its 2 s
// acknowledgement timeout. Measured on a 2-core VM, an idle supervisor
// polling every 150 ms costs 0.12 % of a core, nearly all of it the
// wake-ups themselves; with inotify and a 2 s safety poll, 0.01 %.
//
// inotify is set up only once the command has run for notifyAfter: giving
// an inotify instance back costs a kernel grace period (StopWatch.Notify),
// 12 ms at the median, more than the rest of a short run; the polls of the
// first second cost 7 fstatats.
const (
	stopPollInterval     = 150 * time.Millisecond
	stopSafetyPollPeriod = 2 * time.Second
	notifyAfter          = time.Second
)

// groupPollInterval is how often a supervisor whose command has exited
// during a crew stop looks whether anything else of the group is left.
const groupPollInterval = 50 * time.Millisecond

// waitLoop is the supervisor's state while its command runs.
type waitLoop struct {
	s     *supervisor
	child <-chan childEvent
	stop  *stopRecord
	grace <-chan time.Time
	// graceAt is when grace fires.
	graceAt time.Time
	// losing tells that the run's lease is running out (nil: no lease).
	losing <-chan backend.LeaseLoss
	watch  backend.StopWatch // nil if the run's stop requests cannot be watched
	poll   *time.Ticker
	// notifyAt fires when it is time to ask for inotify (nil: asked).
	notifyAt <-chan time.Time
	jobs     *jobControl // nil without a terminal
	// deadline fires when the attempt's --timeout is over (nil: none).
	deadline <-chan time.Time
}

// wait supervises the running command until it exits: it forwards the
// stop signals crew receives, carries out crew stop's requests, escalates
// to SIGKILL after the grace period, and does job control on a terminal.
// The command is reaped only after the exit was seen and the group dealt
// with, while the zombie leader still pins the group's id.
func (s *supervisor) wait() (syscall.WaitStatus, *stopRecord) {
	l := s.newWaitLoop()
	defer l.close()
	for {
		select {
		case sig := <-s.Signals:
			l.forward(asSignal(sig))
		case <-l.poll.C:
			l.checkStopRequest()
		case <-l.watch.Changed():
			l.checkStopRequest()
		case <-l.notifyAt:
			l.notifyAt = nil
			askForNotify(l.watch, l.poll)
			l.checkStopRequest() // one written before the watch began
		case <-l.grace:
			l.graceOver()
		case <-l.deadline:
			l.timeUp()
		case loss := <-l.losing:
			l.losing = nil
			l.leaseLost(loss)
		case <-l.jobs.continued():
			s.continued(l.jobs)
		case <-s.pty.suspended():
			// The kernel would have stopped the group for a terminal in
			// crew's own session; crew's job stops with it.
			s.signalGroup(syscall.SIGSTOP)
			if !seesStops {
				s.commandStopped(syscall.SIGSTOP, l.jobs) // else the stop event does it
			}
		case ev := <-l.child:
			if !ev.exited {
				s.commandStopped(ev.stopSig, l.jobs)
				continue
			}
			return l.exited(ev), l.stop
		}
	}
}

func (s *supervisor) newWaitLoop() *waitLoop {
	l := &waitLoop{s: s, child: watchChild(s.cmd), losing: s.lg.losing()}
	if !s.lg.running() {
		// A leased command is crew's background job (lease.go).
		l.jobs = startJobControl(s.Stdin)
	}
	w, err := s.Run.WatchStops()
	if err != nil {
		s.Warn(fmt.Errorf("%w; crew stop will have to signal the command itself", err))
		w = noStops{}
	}
	l.watch = w
	l.poll = time.NewTicker(stopPollInterval)
	l.notifyAt = time.After(notifyAfter)
	if t := time.Duration(s.rec.Timeout); t > 0 {
		l.deadline = time.After(t)
	}
	l.checkStopRequest() // one written since the check before launch
	return l
}

// noStops watches nothing: stop requests that cannot be watched.
type noStops struct{}

func (noStops) Changed() <-chan struct{}                              { return nil }
func (noStops) Notify() bool                                          { return false }
func (noStops) Pending() *record.StopRequest                          { return nil }
func (noStops) Acknowledge(*record.StopRequest, record.StopAck) error { return nil }
func (noStops) Close()                                                {}

// askForNotify switches a poll for stop requests to inotify (where the
// kernel has it) and slows the poll to its safety net.
func askForNotify(w backend.StopWatch, poll *time.Ticker) {
	if w.Notify() {
		poll.Reset(stopSafetyPollPeriod)
	}
}

func (l *waitLoop) close() {
	l.poll.Stop()
	l.jobs.close()
	if l.watch != nil {
		l.watch.Close()
	}
}

// begin starts a stop: the signal to the group, SIGCONT so that a stopped
// group hears it now rather than after the grace period, and the grace
// period's clock.
func (l *waitLoop) begin(stop *stopRecord) {
	if l.stop != nil && l.stop.killed {
		stop.killed = true // a timeout's stop had already sent SIGKILL
	}
	l.stop = stop
	l.grace, l.graceAt = time.After(stop.grace), time.Now().Add(stop.grace)
}

// forward passes a signal crew received on to the command's group.
func (l *waitLoop) forward(sig syscall.Signal) {
	if l.stop.mayBeTakenOver() {
		l.begin(&stopRecord{sig: sig, grace: l.s.Grace})
	}
	l.s.signalGroup(sig)
	l.s.signalGroup(syscall.SIGCONT)
}

// timeUp starts the stop --timeout asks for: the same signal, SIGCONT and
// grace period as a forwarded SIGTERM. A stop already under way (crew
// stop, a signal crew received) stays what it is: that run was stopped,
// not timed out.
func (l *waitLoop) timeUp() {
	l.deadline = nil
	if l.stop != nil {
		return
	}
	l.s.Note(fmt.Sprintf("timed out after %s: stopping the command (SIGTERM, then SIGKILL after %s)",
		duration.Format(time.Duration(l.s.rec.Timeout)), duration.Format(l.s.Grace)))
	l.begin(&stopRecord{sig: syscall.SIGTERM, grace: l.s.Grace, timedOut: true})
	l.s.signalGroup(syscall.SIGTERM)
	l.s.signalGroup(syscall.SIGCONT)
}

func (l *waitLoop) graceOver() {
	l.grace = nil
	l.stop.killed = true
	l.s.signalGroup(syscall.SIGKILL)
}

// exited ends what is left of the group as the stop requires, then reaps
// the leader and returns its wait status.
func (l *waitLoop) exited(ev childEvent) syscall.WaitStatus {
	s := l.s
	if !ev.reaped {
		l.endGroup()
	}
	return s.cmd.reap()
}

// endGroup deals with the rest of the command's group once its leader has
// exited: nothing without a stop; after a signal crew received, SIGKILL at
// once (the user wants it over); after crew stop's request, the rest of
// the group keeps its grace period, and gets SIGKILL only if still there
// when it is over.
func (l *waitLoop) endGroup() {
	switch {
	case l.stop == nil:
	case l.stop.req == nil || l.grace == nil:
		l.s.signalGroup(syscall.SIGKILL)
	default:
		l.awaitGroup()
	}
}

func (l *waitLoop) awaitGroup() {
	s := l.s
	for {
		others, err := proc.GroupHasOthers(s.pgid, append(s.lg.members(), s.cmd.pid)...)
		if err == nil && !others {
			return
		}
		select {
		case <-l.grace:
			l.graceOver()
			return
		case <-time.After(groupPollInterval):
		}
	}
}

// signalGroup sends sig to the command's process group. Every caller runs
// while the group's leader, crew's own child, is not reaped yet, so the
// group's id is still the command's. Group 0 or 1 or crew's own is never
// signalled, whatever happened to the command.
func (s *supervisor) signalGroup(sig syscall.Signal) {
	if s.lg.running() {
		// Through the guard, which vouches that the group is the run's;
		// if the guard is gone, through the command, crew's unreaped child.
		if err := s.lg.g.Signal(sig); err != nil && s.cmd != nil && !s.cmd.reaped {
			s.signalUnguarded(sig)
		}
		return
	}
	if s.pgid <= 1 || s.pgid == unix.Getpgrp() {
		return
	}
	_ = unix.Kill(-s.pgid, sig)
}

// signalUnguarded signals a command whose lease guard is gone (it died
// before the command joined its group, or someone killed it): sig to the
// command; SIGKILL to its whole group, for the command may have started
// processes there that nothing else would stop. Once the command, crew's
// unreaped child, has SIGKILL pending, it never runs again and no one but
// crew could move it: the group it is in stays its, and its id pinned by
// it, until crew reaps it.
func (s *supervisor) signalUnguarded(sig syscall.Signal) {
	if err := unix.Kill(s.cmd.pid, sig); err != nil || sig != syscall.SIGKILL {
		return
	}
	if pgid, err := unix.Getpgid(s.cmd.pid); err == nil && pgid > 1 && pgid != unix.Getpgrp() {
		_ = unix.Kill(-pgid, syscall.SIGKILL)
	}
}

func asSignal(sig os.Signal) syscall.Signal {
	if ss, ok := sig.(syscall.Signal); ok {
		return ss
	}
	return syscall.SIGTERM
}

func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return vocab.ExitSignalled(ws.Signal())
	}
	return ws.ExitStatus()
}
