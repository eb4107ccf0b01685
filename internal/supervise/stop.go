package supervise

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// stopRecord remembers a stop and how it was carried out.
type stopRecord struct {
	sig    syscall.Signal
	killed bool // SIGKILL after the grace period
	grace  time.Duration
	// req is crew stop's request, if the stop came from crew stop rather
	// than from a signal crew received.
	req *record.StopRequest
	// timedOut: --timeout began this stop. A stop on purpose (crew stop,
	// a signal crew received) takes it over, so that the run is recorded
	// stopped, and not retried.
	timedOut bool
}

// mayBeTakenOver reports whether a stop on purpose now becomes the run's
// stop: when none is under way, or only the timeout's.
func (r *stopRecord) mayBeTakenOver() bool { return r == nil || r.timedOut }

// checkStopRequest carries out a new crew stop request: crew stop only
// writes it; the supervisor, which provably owns its command's group
// while it has not reaped the leader, signals the group and acknowledges,
// so crew stop knows it need not act itself.
func (l *waitLoop) checkStopRequest() {
	if l.watch == nil {
		return
	}
	req := l.watch.Pending()
	s := l.s
	if req == nil || !s.mayAct(req) {
		return
	}
	if l.stop.mayBeTakenOver() {
		sig := RequestedSignal(req)
		l.begin(&stopRecord{sig: sig, req: req, grace: req.GraceOr(s.Grace)})
		s.signalGroup(sig)
		s.signalGroup(syscall.SIGCONT)
	}
	ack := record.StopAck{At: s.now(), SupervisorPID: os.Getpid(), PGID: s.pgid, RequesterUID: s.requesterOf(req)}
	if err := l.watch.Acknowledge(req, ack); err != nil {
		s.Warn(err)
	}
}

// RequestedSignal is the signal a request asks for; a request that names
// none that exists (the file is input, like any other) means SIGTERM.
func RequestedSignal(req *record.StopRequest) syscall.Signal {
	if req.Signo > 0 && req.Signo < 65 {
		return syscall.Signal(req.Signo)
	}
	if sig := unix.SignalNum(req.Signal); sig != 0 {
		return sig
	}
	return syscall.SIGTERM
}

// stoppedBeforeLaunch records a run that crew stop asked to stop before
// its command started (a waiting start admitted as crew stop told it to
// leave, or a run stopped while provisioning): the command is never run.
func (s *supervisor) stoppedBeforeLaunch(req *record.StopRequest) error {
	sig := RequestedSignal(req)
	s.rec.Signal = vocab.SignalName(sig)
	s.rec.Finish(record.Stopped, s.now(), nil,
		fmt.Sprintf("stopped by %s before the command started; it was never run", req.Who()))
	if err := s.finish(); err != nil {
		return &vocab.InternalError{RunID: s.rec.RunID, Err: err}
	}
	return &vocab.SignalledError{Signal: sig, RunID: s.rec.RunID, By: req.Who()}
}
