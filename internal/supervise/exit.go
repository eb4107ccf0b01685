package supervise

import (
	"fmt"
	"syscall"

	"github.com/crew-dev/crew/internal/record"
)

// describeExit makes the record final from how the command ended: who
// stopped it (crew stop, a signal crew forwarded, Ctrl-C at the terminal),
// or how it exited.
func (s *supervisor) describeExit(ws syscall.WaitStatus, stop *stopRecord) {
	code := exitCode(ws)
	how := fmt.Sprintf("command exited with status %d", code)
	if ws.Signaled() {
		how = "command was killed by " + SignalName(ws.Signal())
	}
	state, signal, reason := record.Failed, "", how
	switch req := s.Store.ReadStopRequest(s.rec.RunID); {
	case stop != nil && stop.req != nil:
		// crew stop asked, and this supervisor carried it out.
		r := *stop.req
		r.Killed = stop.killed
		state, signal = record.Stopped, r.Signal
		reason = fmt.Sprintf("%s; %s", r.Describe(s.pgid), how)
	case stop == nil && req != nil:
		// crew stop signalled the command itself (this supervisor did not
		// answer in time).
		state, signal = record.Stopped, req.Signal
		reason = fmt.Sprintf("%s; %s", req.Describe(s.pgid), how)
	case stop != nil:
		state, signal = record.Stopped, SignalName(stop.sig)
		reason = fmt.Sprintf("crew received %s and forwarded it to process group %d; %s", signal, s.pgid, how)
		if stop.killed {
			reason += fmt.Sprintf(" (sent SIGKILL after the %s grace period)", s.Grace)
		}
	case (s.ownsTTY || s.pty != nil) && ws.Signaled() && (ws.Signal() == syscall.SIGINT || ws.Signal() == syscall.SIGQUIT):
		// The command owned the terminal, so Ctrl-C (or Ctrl-\) went to it
		// directly rather than through crew.
		state, signal = record.Stopped, SignalName(ws.Signal())
		reason = fmt.Sprintf("interrupted from the terminal (%s); %s", signal, how)
	case code == 0:
		state, reason = record.Succeeded, ""
	case ws.Signaled():
		signal = SignalName(ws.Signal())
	}
	s.rec.Signal = signal
	s.rec.Finish(state, s.now(), &code, reason)
}
