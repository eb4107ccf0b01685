package record

import (
	"encoding/json"
	"fmt"
	"time"
)

// StopRequest is left by `crew stop` so that whoever finalizes the run
// says who stopped it.
type StopRequest struct {
	PID    int       `json:"pid"`
	User   string    `json:"user"`
	Signal string    `json:"signal"`
	At     time.Time `json:"at"`
	Killed bool      `json:"killed"` // SIGKILL after the grace period
	Grace  string    `json:"grace"`
}

// Describe says who stopped the run and how, for its reason.
func (r *StopRequest) Describe(pgid int) string {
	s := fmt.Sprintf("stopped by crew stop (pid %d, user %s), which sent %s to process group %d", r.PID, r.User, r.Signal, pgid)
	if r.Killed {
		s += fmt.Sprintf(" and SIGKILL after the %s grace period", r.Grace)
	}
	return s
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
