package supervise

import (
	"fmt"
	"syscall"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// finish makes the final record durable, takes the run out of the active
// set and lets go of its locks (the owner lock last), then says the slot
// is free. If processes the command left still hold its owner lock, the
// slot is theirs: the run stays active, saying how the command ended,
// until they are gone (leaveToLeftovers).
func (s *supervisor) finish() error {
	if s.cmd != nil {
		if pids, held := s.leftovers(); held {
			return s.leaveToLeftovers(pids)
		}
	}
	if err := s.Run.Finish(s.rec); err != nil {
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

// leftovers reports whether processes the command left (in the
// background, under nohup or setsid: anything that kept fd 3) still hold
// the run's owner lock now that the command has ended, and which, where
// the system can tell. Where crew cannot tell, they are taken to hold it:
// a run is never made final while its slot may be in use.
func (s *supervisor) leftovers() (pids []int, held bool) {
	held, err := s.Run.OthersHold()
	if err != nil {
		s.Warn(fmt.Errorf("run %s: %w; it keeps its slot until its owner lock is free", s.rec.RunID, err))
	}
	if !held {
		return nil, false
	}
	pids, _ = s.Run.Holders() // names, not the proof: the lock is
	return pids, true
}

// leaveToLeftovers hands the run's slot to the processes its command left:
// its record stays running and says how the command ended, durably, and
// the supervisor lets go. Whoever finds the owner lock free once they are
// gone (the next start, crew recover, crew wait, crew stop) makes it final
// with the command's end.
func (s *supervisor) leaveToLeftovers(pids []int) error {
	s.rec.AwaitLeftovers(pids)
	if err := s.Run.LeaveToOthers(s.rec); err != nil {
		return err
	}
	s.done = true
	end := s.rec.CommandEnded
	s.Note(fmt.Sprintf("run %s: %s, but %s until they exit; the run is final then (`crew stop %s` ends them)",
		s.rec.RunID, end.Describe(), end.Holders(), s.rec.RunID.Short()))
	return nil
}

// StopBeforeLaunch records a run that was told to stop after it was
// admitted but before its command started.
func StopBeforeLaunch(req Request, sig syscall.Signal) error {
	s := newSupervisor(req)
	s.rec.Signal = vocab.SignalName(sig)
	s.rec.Finish(record.Stopped, s.now(), nil,
		fmt.Sprintf("crew received %s before the command started; it was never run", vocab.SignalName(sig)))
	if err := s.finish(); err != nil {
		return finishFailure(s.rec.RunID, err)
	}
	return &vocab.SignalledError{Signal: sig, RunID: s.rec.RunID}
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
	s.lg.stop(s.Warn, s.rec.RunID)
	if !s.done {
		code := vocab.ExitInternal
		s.rec.Finish(record.Failed, s.now(), &code, "crew internal error: "+cause.Error())
		if err := s.finish(); err != nil {
			s.Warn(fmt.Errorf("run %s: could not record the failure (%w); `crew recover` will finalize it", id, err))
		}
	}
	return &vocab.InternalError{RunID: id, Err: cause}
}

// recoverPanic turns a panic after admission into a recorded failure and
// exit 125 instead of a crash that leaves the slot to recovery.
func (s *supervisor) recoverPanic(err *error) {
	if p := recover(); p != nil {
		*err = s.internalFailure(fmt.Errorf("panic: %v", p))
	}
}
