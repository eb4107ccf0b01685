package supervise

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// When the final record cannot be written (a full disk, a directory made
// unwritable), the supervisor still knows how the run ended, and must not
// lose it. It keeps the outcome in the run's owner lock file (room for it
// was made at reservation), then retries the durable finish with backoff
// while it holds the slot, for at most finishRetryFor. If that runs out,
// or crew is told to stop, it exits 125 and leaves the outcome where every
// finalizer (admission, `crew recover`, `crew wait`) looks for it.

// finishRetryFor bounds the retrying. A variable so tests can shorten it.
var finishRetryFor = time.Minute

// Backoff between attempts.
const (
	firstRetryDelay = 100 * time.Millisecond
	maxRetryDelay   = 5 * time.Second
)

// finishFailure is what a run whose finish failed returns: an
// UnrecordedError says it all; anything else is crew's internal error.
func finishFailure(id record.RunID, err error) error {
	var u *vocab.UnrecordedError
	if errors.As(err, &u) {
		return u
	}
	return &vocab.InternalError{RunID: id, Err: err}
}

// retryFinish is finish after the final record could not be written
// (first): keep the outcome, then retry. (A run of this crew keeps it in
// its own record file, final and durable: its slot is free then. A run an
// older crew reserved keeps it in its owner lock file, and holds its slot
// while crew retries.)
func (s *supervisor) retryFinish(first error) error {
	id := s.rec.RunID
	keepErr := s.Run.KeepOutcome(s.rec, first)
	if s.ownsTTY {
		// Give the terminal back now, so that Ctrl-C reaches crew while it
		// retries (the command's group is gone).
		s.reclaimTTY()
	}
	s.Warn(s.retryNotice(first, keepErr))
	last := first
	deadline := time.Now().Add(finishRetryFor)
	for delay := firstRetryDelay; ; delay = min(2*delay, maxRetryDelay) {
		if sig, stop := s.pause(delay); stop {
			return s.unrecorded(fmt.Errorf("%w (gave up on receiving %s)", last, vocab.SignalName(sig)), keepErr)
		}
		err := s.Run.FinishAgain(s.rec)
		if err == nil {
			s.Warn(fmt.Errorf("run %s: its end is recorded after all (%s)", id, outcomeWords(s.rec)))
			return nil
		}
		if err.Error() != last.Error() {
			s.Warn(fmt.Errorf("run %s: still cannot record its end: %w", id, err))
		}
		last = err
		if time.Now().After(deadline) {
			return s.unrecorded(fmt.Errorf("%w (gave up after %s)", err, finishRetryFor), keepErr)
		}
	}
}

// pause waits delay, or less if crew is told to stop.
func (s *supervisor) pause(delay time.Duration) (syscall.Signal, bool) {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return 0, false
	case sig := <-s.Signals:
		return asSignal(sig), true
	}
}

func (s *supervisor) unrecorded(err, keepErr error) error {
	return &vocab.UnrecordedError{RunID: s.rec.RunID, Outcome: outcomeWords(s.rec), Kept: keepErr == nil, Where: s.Run.OutcomePath(), Err: err}
}

// retryNotice is the first word to the user: what could not be recorded,
// where the outcome is kept, and what crew does now.
func (s *supervisor) retryNotice(first, keepErr error) error {
	then := fmt.Sprintf("retrying for up to %s (interrupt crew to give up; `crew recover` records it later)", finishRetryFor)
	if keepErr != nil {
		return fmt.Errorf("run %s ended (%s), but crew cannot record it: %w; nor keep it in %s (%w); %s",
			s.rec.RunID, outcomeWords(s.rec), first, s.Run.OutcomePath(), keepErr, then)
	}
	return fmt.Errorf("run %s ended (%s), but crew cannot record it: %w; the outcome is kept in %s; %s",
		s.rec.RunID, outcomeWords(s.rec), first, s.Run.OutcomePath(), then)
}

// outcomeWords says how a final record ends, for messages.
func outcomeWords(rec *record.Run) string {
	switch {
	case rec.ExitCode == nil && rec.Signal != "":
		return fmt.Sprintf("%s, %s", rec.State, rec.Signal)
	case rec.ExitCode == nil:
		return string(rec.State)
	}
	return fmt.Sprintf("%s, exit %d", rec.State, *rec.ExitCode)
}
