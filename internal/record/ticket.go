package record

import (
	"encoding/json"
	"fmt"
	"time"
)

// TicketVersion is the version of queue tickets.
const TicketVersion = 1

// Ticket is a start waiting for a slot (--wait). Its id is the run id the
// run will have once admitted; ids are issued inside the admission
// critical section in strictly increasing order, so sorting tickets by id
// is arrival order.
type Ticket struct {
	Version   int       `json:"version"`
	RunID     RunID     `json:"runId"`
	Task      string    `json:"task"`
	Pool      string    `json:"pool,omitempty"`
	Command   []string  `json:"command"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	CreatedAt time.Time `json:"createdAt"`
	// Labels are the waiting start's --label pairs, so that crew status
	// and crew wait --label find it before its run record exists.
	Labels Labels `json:"labels,omitempty"`
}

// Encode renders the ticket as it is stored.
func (t *Ticket) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode ticket %s: %w", t.RunID, err)
	}
	return append(b, '\n'), nil
}

// DecodeTicket parses and validates a ticket.
func DecodeTicket(data []byte) (*Ticket, error) {
	var t Ticket
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("not a JSON queue ticket: %w", err)
	}
	if t.Version != TicketVersion {
		return nil, fmt.Errorf("unknown ticket version %d (this crew reads version %d)", t.Version, TicketVersion)
	}
	if _, err := ParseRunID(string(t.RunID)); err != nil {
		return nil, fmt.Errorf("bad runId: %w", err)
	}
	if err := ValidateTask(t.Task); err != nil {
		return nil, fmt.Errorf("bad task: %w", err)
	}
	if err := t.Labels.Validate(); err != nil {
		return nil, fmt.Errorf("bad labels: %w", err)
	}
	return &t, nil
}
