package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// RecordVersion is the version of the run record format this crew writes
// and reads. Fields may be added within a version; none are renamed.
const RecordVersion = 1

// State is where a run is in its lifecycle.
type State string

const (
	Provisioning State = "provisioning" // admitted, slot reserved, command not started
	Running      State = "running"      // command started
	Succeeded    State = "succeeded"    // command exited 0
	Failed       State = "failed"       // command exited non-zero, could not start, or crew failed
	Stopped      State = "stopped"      // stopped by a signal on purpose
	Interrupted  State = "interrupted"  // its owner died without finalizing; finalized by recovery
)

// Active reports whether a run in this state may hold a slot.
func (s State) Active() bool { return s == Provisioning || s == Running }

func (s State) valid() bool {
	switch s {
	case Provisioning, Running, Succeeded, Failed, Stopped, Interrupted:
		return true
	}
	return false
}

// Run is the durable description of one run. It is the single source of
// truth for the run's state; whether anyone still works on it is for the
// run's owner (a lock, a lease) to say.
type Run struct {
	Version int      `json:"version"`
	RunID   RunID    `json:"runId"`
	Task    string   `json:"task"`
	State   State    `json:"state"`
	Command []string `json:"command"`
	Dir     string   `json:"dir,omitempty"`
	// Labels are crew start's --label KEY=VALUE pairs (labels.go).
	Labels     Labels     `json:"labels,omitempty"`
	Host       string     `json:"host"`
	CreatedAt  time.Time  `json:"createdAt"`
	StartedAt  *time.Time `json:"startedAt"`
	FinishedAt *time.Time `json:"finishedAt"`
	ExitCode   *int       `json:"exitCode"`
	Signal     string     `json:"signal,omitempty"`
	Reason     string     `json:"reason"`
	// SupervisorPID is the crew process that admitted and supervises the run.
	SupervisorPID int `json:"supervisorPid"`
	TaskPID       int `json:"taskPid"`
	PGID          int `json:"pgid"`
	// Forced runs were admitted past the cap with --force.
	Forced bool `json:"forced"`
	// Pool is the pool whose cap the run also counts against, if any.
	Pool string `json:"pool"`
	// LogMax caps the run's log in bytes (0: no cap); see runstore's
	// capped logs for what is kept.
	LogMax int64 `json:"logMax,omitempty"`
	// Parent is the run whose command started this run's crew start (its
	// CREW_RUN_ID), if any: admission follows these links to tell a nested
	// start that waits for its own ancestors. Input like the rest of the
	// record: only ever compared, never acted on.
	Parent RunID `json:"parentRunId,omitempty"`
	// QueuedAt is when the run joined the queue, if it waited (--wait).
	QueuedAt *time.Time `json:"queuedAt,omitempty"`
	// NeverAdmitted: the record of a start that waited in line in the
	// background (crew start --detach --wait) and left it without a run
	// (its --wait=D ran out, crew stop, a signal): it held no slot, and
	// its command never ran. Final from the start.
	NeverAdmitted bool `json:"neverAdmitted,omitempty"`
	// Events is the run's history, oldest first.
	Events []Event `json:"events"`
	// Locks identifies the run's lock files, for liveness probes that
	// must not be fooled by a file swapped under a living holder.
	Locks *LockIDs `json:"locks,omitempty"`
	// SlotsInUse and MaximumInProgress are what admission saw, for the record.
	SlotsInUse        int `json:"slotsInUseAtAdmission"`
	MaximumInProgress int `json:"maximumInProgressAtAdmission"`
	// Timeout, Retries and RetryDelay are crew start's --timeout (per
	// attempt), --retries and --retry-delay; TimedOut says the last
	// attempt was ended by the timeout, and Attempts (only with retries)
	// is each attempt so far. See attempt.go.
	Timeout    Duration  `json:"timeout,omitempty"`
	Retries    int       `json:"retries,omitempty"`
	RetryDelay Duration  `json:"retryDelay,omitempty"`
	TimedOut   bool      `json:"timedOut,omitempty"`
	Attempts   []Attempt `json:"attempts,omitempty"`
	// CommandEnded is set once the command has ended while processes it
	// left still hold the run's slot (leftovers.go); the record stays
	// running until they are gone, and keeps it once final.
	CommandEnded *CommandEnd `json:"commandEnded,omitempty"`
}

// Event is one step of a run's history.
type Event struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

// AddEvent appends a step to the run's history.
func (r *Run) AddEvent(at time.Time, format string, args ...any) {
	r.Events = append(r.Events, Event{At: at, What: fmt.Sprintf(format, args...)})
}

// Finish makes the run final: state, end time, exit code (nil if unknown)
// and reason, and a last event that says so.
func (r *Run) Finish(state State, at time.Time, exitCode *int, reason string) {
	r.State = state
	r.FinishedAt = &at
	r.ExitCode = exitCode
	r.Reason = reason
	r.AddEvent(at, "%s", r.finalEvent())
}

func (r *Run) finalEvent() string {
	if r.Reason == "" {
		return string(r.State)
	}
	return string(r.State) + ": " + r.Reason
}

// Encode renders the record as it is stored.
func (r *Run) Encode() ([]byte, error) {
	w := jsonWriter{b: make([]byte, 0, 1024)}
	r.appendJSON(&w)
	if w.err != nil {
		return nil, fmt.Errorf("encode run %s: %w", r.RunID, w.err)
	}
	return append(w.b, '\n'), nil
}

// DecodeRun parses and validates a stored record in one pass. Anything
// that is not a complete record of a known version is an error, never a
// panic and never a half-filled Run.
func DecodeRun(data []byte) (*Run, error) {
	if len(data) == 0 {
		return nil, errors.New("empty file")
	}
	// The outer Version shadows Run's, so a missing field is told apart
	// from a zero one in the same pass.
	var w struct {
		Run
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typ) && typ.Field == "":
			return nil, fmt.Errorf("not a JSON run record: the file holds a JSON %s, not an object", typ.Value)
		case errors.As(err, &typ) && typ.Field == "version":
			return nil, fmt.Errorf("not a JSON run record: \"version\" is a JSON %s, not a number", typ.Value)
		case errors.As(err, &typ):
			return nil, fmt.Errorf("malformed run record: field %q is a JSON %s, not %s", typ.Field, typ.Value, typ.Type)
		case errors.As(err, new(*json.SyntaxError)):
			return nil, fmt.Errorf("not a JSON run record: %w", err)
		}
		return nil, fmt.Errorf("malformed run record: %w", err)
	}
	if w.Version == nil {
		return nil, errors.New("no \"version\" field; not a crew run record")
	}
	if *w.Version != RecordVersion {
		return nil, fmt.Errorf("unknown record version %d (this crew reads version %d)", *w.Version, RecordVersion)
	}
	r := w.Run
	r.Version = *w.Version
	if _, err := ParseRunID(string(r.RunID)); err != nil {
		return nil, fmt.Errorf("bad runId: %w", err)
	}
	if err := ValidateTask(r.Task); err != nil {
		return nil, fmt.Errorf("bad task: %w", err)
	}
	if err := r.Labels.Validate(); err != nil {
		return nil, fmt.Errorf("bad labels: %w", err)
	}
	if !r.State.valid() {
		return nil, fmt.Errorf("unknown state %q", r.State)
	}
	if !r.State.Active() && r.FinishedAt == nil {
		return nil, fmt.Errorf("state %s without finishedAt", r.State)
	}
	if c := r.CommandEnded; c != nil && (!c.State.valid() || c.State.Active() || c.State == Interrupted) {
		return nil, fmt.Errorf("commandEnded: %q is not how a command ends", c.State)
	}
	return &r, nil
}
