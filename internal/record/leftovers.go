package record

import (
	"fmt"
	"strings"
	"time"
)

// CommandEnd is how a run's command ended while processes it left behind
// (started in the background, under nohup or setsid) still held the run's
// owner lock, which they inherited as fd 3, and so its slot. The run stays
// active until they are gone; whoever then finalizes it records this end,
// with how they ended (FinishAfterLeftovers).
type CommandEnd struct {
	At       time.Time `json:"at"`
	State    State     `json:"state"`
	ExitCode *int      `json:"exitCode"`
	Signal   string    `json:"signal,omitempty"`
	TimedOut bool      `json:"timedOut,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	// PIDs are the processes the kernel showed holding the slot when the
	// command ended; empty where the system cannot tell.
	PIDs []int `json:"pids,omitempty"`
}

// AwaitLeftovers turns a run that Finish has just made final (in memory)
// back into a running one whose command has ended (CommandEnded), because
// processes the command left still hold its slot: the final state, exit
// code, signal and reason move into CommandEnded, and Finish's last event
// gives way to one that says why the run is not final yet.
func (r *Run) AwaitLeftovers(pids []int) {
	end := &CommandEnd{At: *r.FinishedAt, State: r.State, ExitCode: r.ExitCode, Signal: r.Signal,
		TimedOut: r.TimedOut, Reason: r.Reason, PIDs: pids}
	if n := len(r.Events); n > 0 {
		r.Events = r.Events[:n-1] // Finish's "<state>: <reason>"
	}
	r.State, r.FinishedAt, r.ExitCode, r.Signal, r.TimedOut, r.Reason = Running, nil, nil, "", false, ""
	r.CommandEnded = end
	r.AddEvent(end.At, "%s; %s", end.Describe(), end.Holders())
}

// Describe says how the command ended: "command exited with status 0", or
// its run's reason where it has one.
func (c *CommandEnd) Describe() string {
	switch {
	case c.Reason != "":
		return string(c.State) + ": " + c.Reason
	case c.ExitCode != nil:
		return fmt.Sprintf("command exited with status %d", *c.ExitCode)
	}
	return string(c.State)
}

// Holders says what holds the slot: "2 processes it left (pids 4711,
// 4712) still hold the run's slot".
func (c *CommandEnd) Holders() string {
	switch len(c.PIDs) {
	case 0:
		return "processes it left still hold the run's slot"
	case 1:
		return fmt.Sprintf("1 process it left (pid %d) still holds the run's slot", c.PIDs[0])
	}
	pids := make([]string, len(c.PIDs))
	for i, p := range c.PIDs {
		pids[i] = fmt.Sprint(p)
	}
	return fmt.Sprintf("%d processes it left (pids %s) still hold the run's slot", len(c.PIDs), strings.Join(pids, ", "))
}

// FinishAfterLeftovers makes a run whose command had ended (CommandEnded)
// final once the processes it left are gone: with the command's end, and
// note, how they ended.
func (r *Run) FinishAfterLeftovers(at time.Time, note string) {
	c := r.CommandEnded
	r.Signal, r.TimedOut = c.Signal, c.TimedOut
	reason := note
	if c.Reason != "" {
		reason = c.Reason + "; " + note
	}
	r.Finish(c.State, at, c.ExitCode, reason)
}
