package record

import (
	"fmt"
	"os"
	"time"
)

// What a finalizer writes of a run whose owner is gone, in the same words
// on every store: only the cause of the owner's going differs (a process
// that died, on a state root; a lease that ran out, on etcd).

// EndDead makes an active record whose owner is gone final: with the end
// its command left (CommandEnded) if the processes it left held the slot
// until now, else as interrupted. gone says how the owner went, such as
// "exited without finalizing the run (killed or crashed)"; logExists,
// whether the run has a log (its command may have started).
func (r *Run) EndDead(now time.Time, gone string, logExists bool) {
	if r.CommandEnded != nil {
		r.FinishAfterLeftovers(now, fmt.Sprintf("the processes it left held the run's slot until they ended (gone at %s, when crew process %d looked)",
			now.UTC().Format(time.RFC3339), os.Getpid()))
		return
	}
	since := r.CreatedAt
	if r.StartedAt != nil {
		since = *r.StartedAt
	}
	reason := fmt.Sprintf("owner process %d on host %s %s; state was %s since %s; %s; exit status unknown",
		r.SupervisorPID, r.Host, gone, r.State, since.UTC().Format(time.RFC3339), r.commandFate(logExists))
	r.State = Interrupted
	r.FinishedAt = &now
	r.ExitCode = nil
	r.Reason = reason
	r.AddEvent(now, "interrupted: finalized by crew process %d: %s", os.Getpid(), reason)
}

// commandFate says what is known of the command of a run whose owner died.
func (r *Run) commandFate(logExists bool) string {
	a := r.Attempt()
	switch {
	case r.State == Running && r.TaskPID == 0 && a != nil && a.EndedAt != nil:
		// Its supervisor died between two attempts (--retries).
		return fmt.Sprintf("no command was running: attempt %d of %d had ended (%s) and the next had not started", a.Number, r.MaxAttempts(), a.Reason)
	case r.State == Running:
		return fmt.Sprintf("command pid %d is gone too", r.TaskPID)
	case !logExists:
		return "the command was never started"
	}
	return "the command may have started (its start was not recorded) and is gone if it did"
}

// EndStopped makes an active record final as stopped by crew stop's req,
// whose supervisor was already gone: crew stop signalled the command and
// saw it end.
func (r *Run) EndStopped(now time.Time, req *StopRequest) {
	if r.CommandEnded != nil {
		r.FinishAfterLeftovers(now, fmt.Sprintf("the processes it left held the run's slot until %s ended them with %s", req.Who(), req.Signal))
		return
	}
	r.Signal = req.Signal
	r.Finish(Stopped, now, nil, fmt.Sprintf("%s; its supervisor (pid %d) was already gone, so the command's exit status is unknown",
		req.Describe(r.PGID), r.SupervisorPID))
}

// OwnerExited is how a state root's owner went (EndDead's gone).
const OwnerExited = "exited without finalizing the run (killed or crashed)"
