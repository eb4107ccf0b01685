package supervise

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// retriesAfter reports whether attempt n, which ended as e, is followed by
// another (crew start --retries): only a failure is retried (a non-zero
// exit, a signal crew did not send, or the timeout), never a stop on
// purpose (crew stop, a signal crew received, Ctrl-C at the terminal).
func (s *supervisor) retriesAfter(e ending, n int) bool {
	return e.state == record.Failed && !e.lease && n < s.rec.MaxAttempts()
}

// endAttempt records how the latest attempt ended, in a run with retries.
func (s *supervisor) endAttempt(e ending) {
	a := s.rec.Attempt()
	if a == nil || a.EndedAt != nil {
		return
	}
	now, code := s.now(), e.code
	a.EndedAt, a.ExitCode, a.Signal, a.TimedOut, a.Reason = &now, &code, e.signal, e.timedOut, e.reason
}

// between ends attempt n, which failed as e, and waits --retry-delay
// before the next one, which it marks in the log. The run keeps its slot all along: it stays
// running, and this process keeps holding its locks (so it is never
// admitted anew). A stop meanwhile (crew stop, a signal crew received)
// makes the run final as stopped, and stopped is true.
func (s *supervisor) between(n int, e ending, log *runLog) (stopped bool, err error) {
	delay := time.Duration(s.rec.RetryDelay)
	s.endAttempt(e)
	// No command runs until the next attempt: nothing to signal, and no
	// pid for status to show.
	s.rec.TaskPID, s.rec.PGID, s.pgid = 0, 0, 0
	s.rec.AddEvent(s.now(), "attempt %d of %d: %s; next attempt in %s", n, s.rec.MaxAttempts(), e.reason, duration.Format(delay))
	if err := s.Run.Update(s.rec); err != nil {
		return false, s.internalFailure(err)
	}
	next := fmt.Sprintf("attempt %d of %d after %s", n+1, s.rec.MaxAttempts(), e.short(time.Duration(s.rec.Timeout)))
	line := next
	if delay > 0 {
		line += ", in " + duration.Format(delay)
	}
	s.Note(line)
	sig, req, expired := s.awaitRetry(delay)
	how := fmt.Sprintf("while waiting to retry (attempt %d of %d: %s); no command was running", n, s.rec.MaxAttempts(), e.reason)
	switch {
	case expired:
		code := vocab.ExitInternal
		s.rec.Finish(record.Failed, s.now(), &code, "the run's lease expired "+how)
		return true, nil
	case sig == 0:
		// crew logs shows the attempts one after the other: say where
		// each begins.
		log.note(next)
		return false, nil
	}
	reason := fmt.Sprintf("crew received %s %s", vocab.SignalName(sig), how)
	if req != nil {
		reason = fmt.Sprintf("stopped by %s %s", req.Who(), how)
	}
	code := vocab.ExitSignalled(sig)
	s.rec.Signal = vocab.SignalName(sig)
	s.rec.Finish(record.Stopped, s.now(), &code, reason)
	return true, nil
}

// short names how an attempt ended, for crew start's line about the next.
func (e ending) short(timeout time.Duration) string {
	switch {
	case e.timedOut:
		return fmt.Sprintf("timing out (%s)", duration.Format(timeout))
	case e.signal != "":
		return e.signal
	}
	return fmt.Sprintf("exit %d", e.code)
}

// awaitRetry waits d unless a stop comes first: a signal crew received, or a
// crew stop request, which it acknowledges (crew stop then need not act
// itself; there is no command to signal). It returns the stop's signal,
// 0 if there was none, and crew stop's request if it was one; or that the
// run's lease expired meanwhile (a store of leases). On a lease, it also
// waits, after d, until the lease is fresh: an attempt started on a lease
// that went unrenewed (etcd cut off during the delay) could outlive it.
func (s *supervisor) awaitRetry(d time.Duration) (syscall.Signal, *record.StopRequest, bool) {
	w, err := s.Run.WatchStops()
	if err != nil {
		s.Warn(fmt.Errorf("%w; crew stop will have to wait for the next attempt", err))
		w = noStops{}
	}
	defer w.Close()
	pending := w.Pending
	poll := time.NewTicker(stopPollInterval)
	defer poll.Stop()
	notifyAt := time.After(notifyAfter) // as in wait: a short delay polls
	timer := time.NewTimer(d)
	defer timer.Stop()
	expired := s.lg.expired()
	var renewal <-chan time.Time // d is over: looking for a fresh lease
	for req := pending(); ; req = pending() {
		if req != nil && s.mayAct(req) {
			ack := record.StopAck{At: s.now(), SupervisorPID: os.Getpid(), RequesterUID: s.requesterOf(req)}
			if err := w.Acknowledge(req, ack); err != nil {
				s.Warn(err)
			}
			return RequestedSignal(req), req, false
		}
		select {
		case sig := <-s.Signals:
			return asSignal(sig), nil, false
		case <-expired:
			return 0, nil, true
		case <-timer.C:
			if s.lg.fresh() {
				return 0, nil, false
			}
			s.Note("the run's lease was not renewed lately (etcd does not answer): the next attempt waits for a renewal")
			t := time.NewTicker(leasePollInterval)
			defer t.Stop()
			renewal = t.C
		case <-renewal:
			if s.lg.fresh() {
				return 0, nil, false
			}
		case <-poll.C:
		case <-w.Changed():
		case <-notifyAt:
			notifyAt = nil
			askForNotify(w, poll)
		}
	}
}

// leasePollInterval is how often an attempt due on a lease that is not
// fresh looks again: a renewal comes every fifth of the TTL (at least
// 400 ms).
const leasePollInterval = 50 * time.Millisecond
