package supervise

import (
	"fmt"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// ending is how one attempt of the command ended, as its record will say.
type ending struct {
	state    record.State
	signal   string
	reason   string
	code     int  // crew start's exit code for it: the command's, or 124 for a timeout
	timedOut bool // --timeout ended it
	lease    bool // the run's lease ended it (never retried)
	// interrupt is the SIGINT or SIGQUIT typed at the terminal that
	// killed the command (ExitError.TerminalInterrupt).
	interrupt syscall.Signal
}

// endingOf says how the command ended: who stopped it (crew stop, a signal
// crew forwarded, Ctrl-C at the terminal, --timeout), or how it exited.
func (s *supervisor) endingOf(ws syscall.WaitStatus, stop *stopRecord) ending {
	code := exitCode(ws)
	how := fmt.Sprintf("command exited with status %d", code)
	if ws.Signaled() {
		how = "command was killed by " + vocab.SignalName(ws.Signal())
	}
	e := ending{state: record.Failed, reason: how, code: code}
	switch req := s.stopRequestOfRight(); {
	case s.lg.end != "" && code != 0:
		// The lease, not the command nor whoever stopped it, ended the run.
		e.reason, e.lease = s.lg.end+"; "+how, true
		if ws.Signaled() {
			e.signal = vocab.SignalName(ws.Signal())
		}
	case stop != nil && stop.req != nil:
		// crew stop asked, and this supervisor carried it out.
		r := *stop.req
		r.Killed = stop.killed
		e.state, e.signal = record.Stopped, r.Signal
		e.reason = fmt.Sprintf("%s; %s", r.Describe(s.pgid), how)
	case (stop == nil || stop.timedOut) && req != nil:
		// crew stop signalled the command itself (this supervisor did not
		// answer in time).
		e.state, e.signal = record.Stopped, req.Signal
		e.reason = fmt.Sprintf("%s; %s", req.Describe(s.pgid), how)
	case stop != nil && stop.timedOut:
		// The command is said to have timed out even if it exited on its
		// own just as the time ran out, as with coreutils timeout.
		e.signal, e.code, e.timedOut = vocab.SignalName(stop.sig), vocab.ExitTimedOut, true
		e.reason = fmt.Sprintf("timed out after %s: crew sent %s to process group %d", duration.Format(time.Duration(s.rec.Timeout)), e.signal, s.pgid)
		if stop.killed {
			e.reason += fmt.Sprintf(" and SIGKILL after the %s grace period", s.Grace)
		}
		e.reason += "; " + how
	case stop != nil:
		e.state, e.signal = record.Stopped, vocab.SignalName(stop.sig)
		e.reason = fmt.Sprintf("crew received %s and forwarded it to process group %d; %s", e.signal, s.pgid, how)
		if stop.killed {
			e.reason += fmt.Sprintf(" (sent SIGKILL after the %s grace period)", s.Grace)
		}
	case (s.ownsTTY || s.pty != nil) && ws.Signaled() && (ws.Signal() == syscall.SIGINT || ws.Signal() == syscall.SIGQUIT):
		// The command owned the terminal, so Ctrl-C (or Ctrl-\) went to it
		// directly rather than through crew.
		e.state, e.signal, e.interrupt = record.Stopped, vocab.SignalName(ws.Signal()), ws.Signal()
		e.reason = fmt.Sprintf("interrupted from the terminal (%s); %s", e.signal, how)
	case code == 0:
		e.state, e.reason = record.Succeeded, ""
	case ws.Signaled():
		e.signal = vocab.SignalName(ws.Signal())
	}
	return e
}

// describeExit makes the record final from how the last attempt ended.
func (s *supervisor) describeExit(e ending) {
	s.interrupt = e.interrupt
	s.endAttempt(e)
	s.rec.Signal = e.signal
	s.rec.TimedOut = e.timedOut
	code := e.code
	s.rec.Finish(e.state, s.now(), &code, e.reason)
}
