package supervise

import (
	"fmt"
	"syscall"

	"github.com/crew-dev/crew/internal/record"
)

// finish makes the final record durable, takes the run out of the active
// set and lets go of its locks (the owner lock last), then says the slot
// is free.
func (s *supervisor) finish() error {
	if err := s.Locks.Finish(s.rec); err != nil {
		if err := s.retryFinish(err); err != nil {
			return err
		}
	}
	s.done = true
	if s.Finished != nil {
		s.Finished()
	}
	return nil
}

// StopBeforeLaunch records a run that was told to stop after it was
// admitted but before its command started.
func StopBeforeLaunch(req Request, sig syscall.Signal) error {
	s := newSupervisor(req)
	s.rec.Signal = SignalName(sig)
	s.rec.Finish(record.Stopped, s.now(), nil,
		fmt.Sprintf("crew received %s before the command started; it was never run", SignalName(sig)))
	if err := s.finish(); err != nil {
		return finishFailure(s.rec.RunID, err)
	}
	return &SignalledError{Signal: sig, RunID: s.rec.RunID}
}

// Abandon records a reserved run that crew could not go on with (the
// detached supervisor could not be started) as failed.
func Abandon(req Request, cause error) error {
	return newSupervisor(req).internalFailure(cause)
}

// internalFailure ends a run because crew itself failed: the command (if
// it started) is killed first, so the record never calls a live run
// finished, then the run is recorded as failed.
func (s *supervisor) internalFailure(cause error) error {
	id := s.rec.RunID
	if s.cmd != nil && !s.cmd.reaped {
		s.signalGroup(syscall.SIGKILL) // not reaped yet: the group is still the command's
		s.cmd.reap()
	}
	if !s.done {
		code := 125
		s.rec.Finish(record.Failed, s.now(), &code, "crew internal error: "+cause.Error())
		if err := s.finish(); err != nil {
			s.Warn(fmt.Errorf("run %s: could not record the failure (%w); `crew recover` will finalize it", id, err))
		}
	}
	return &InternalError{RunID: id, Err: cause}
}

// recoverPanic turns a panic after admission into a recorded failure and
// exit 125 instead of a crash that leaves the slot to recovery.
func (s *supervisor) recoverPanic(err *error) {
	if p := recover(); p != nil {
		*err = s.internalFailure(fmt.Errorf("panic: %v", p))
	}
}
