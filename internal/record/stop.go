package record

import (
	"encoding/json"
	"fmt"
	"time"
)

// StopRequest is left by `crew stop` in the state root. It is how crew
// stop asks a run's supervisor to stop the run (the supervisor signals its
// own command's process group, which it provably owns; crew stop never
// signals a pid or group it read from a file), how it tells a waiting
// start to leave the queue, and how whoever finalizes the run says who
// stopped it.
type StopRequest struct {
	// RunID is the run the request was written for. Who wrote a request
	// is its file's owner, never its content; but a file can be moved to
	// another run's name by anyone who may write the directory, and this
	// is how the store tells (a request that names another run is none).
	// Requests written before crew said it name none.
	RunID  RunID     `json:"runId,omitempty"`
	PID    int       `json:"pid"`
	User   string    `json:"user"`
	Signal string    `json:"signal"`
	At     time.Time `json:"at"`
	Killed bool      `json:"killed"` // SIGKILL after the grace period
	Grace  string    `json:"grace"`
	// Signo is Signal's number, for the supervisor to send.
	Signo int `json:"signo,omitempty"`
	// Targets says what was signalled, when it was not the run's recorded
	// process group (crew stop signalling an orphan's processes itself).
	Targets string `json:"targets,omitempty"`
	// Ack is set by the run's supervisor once it has acted on the request.
	Ack *StopAck `json:"ack,omitempty"`
	// FileUID is the user that owns the request file, as fstat reported
	// it on the descriptor crew read the request through: the kernel's
	// word for who wrote it. runstore sets it on every request it reads;
	// it is never stored, since a file's content can say anything. Nil for
	// a request that was not read from a file.
	FileUID *int `json:"-"`
}

// StopAck is a supervisor's answer to a stop request: it has signalled
// its command's process group and will record the run.
type StopAck struct {
	At            time.Time `json:"at"`
	SupervisorPID int       `json:"supervisorPid"`
	PGID          int       `json:"pgid"`
	// RequesterUID is who asked, as the supervisor found it when it took
	// the request up (the request file's owner then). The supervisor
	// rewrites the file as the run's own user, after which the file's
	// owner no longer says who asked.
	RequesterUID *int `json:"requesterUid,omitempty"`
}

// MayStop reports whether user uid may stop a run, or take a waiting start
// out of the queue, that belongs to user owner: its own user and root may,
// no one else, just as only they may signal its processes. A state root
// shared with a group lets its members see each other's runs, never lend
// them each other's rights.
func MayStop(uid, owner int) bool { return uid == owner || uid == 0 }

// Requester says who asked for this stop of a run that belongs to user
// owner, and whether they may stop it. Only a request file written by the
// run's own user or by root (FileUID) is believed at all; in one, an
// acknowledgement names the requester the run's supervisor checked. The
// content of any other file is not believed: its writer is the requester,
// and may not stop the run.
func (r *StopRequest) Requester(owner int) (uid int, ok bool) {
	if r.FileUID == nil {
		return -1, false
	}
	writer := *r.FileUID
	if !MayStop(writer, owner) {
		return writer, false
	}
	if r.Ack != nil && r.Ack.RequesterUID != nil {
		return *r.Ack.RequesterUID, MayStop(*r.Ack.RequesterUID, owner)
	}
	return writer, true
}

// GraceOr is the request's grace period, or def if it has none that
// makes sense.
func (r *StopRequest) GraceOr(def time.Duration) time.Duration {
	if d, err := time.ParseDuration(r.Grace); err == nil && d >= 0 {
		return d
	}
	return def
}

// Describe says who stopped the run and how, for its reason.
func (r *StopRequest) Describe(pgid int) string {
	target := fmt.Sprintf("process group %d", pgid)
	if r.Targets != "" {
		target = r.Targets
	}
	s := fmt.Sprintf("stopped by crew stop (pid %d, user %s), which sent %s to %s", r.PID, r.User, r.Signal, target)
	if r.Killed {
		s += fmt.Sprintf(" and SIGKILL after the %s grace period", r.Grace)
	}
	return s
}

// Who names the crew stop that asked, for messages.
func (r *StopRequest) Who() string {
	return fmt.Sprintf("crew stop (pid %d, user %s)", r.PID, r.User)
}

// Encode renders the request as it is stored.
func (r *StopRequest) Encode() ([]byte, error) { return json.Marshal(r) }

// DecodeStopRequest parses a stored stop request.
func DecodeStopRequest(data []byte) (*StopRequest, error) {
	var r StopRequest
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("not a stop request: %w", err)
	}
	return &r, nil
}

// Refusal is a start that was not admitted, as `crew status TASK` shows it.
type Refusal struct {
	At       time.Time `json:"at"`
	Task     string    `json:"task"`
	Reason   string    `json:"reason"`
	ExitCode int       `json:"exitCode"`
	PID      int       `json:"pid"`
}
