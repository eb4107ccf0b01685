package runstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// TicketVersion is the version of queue tickets.
const TicketVersion = 1

// Ticket is a start waiting for a slot (--wait). Its id is the run id the
// run will have once admitted; ids are issued under the admission lock in
// strictly increasing order, so sorting tickets by id is arrival order.
type Ticket struct {
	Version   int       `json:"version"`
	RunID     RunID     `json:"runId"`
	Task      string    `json:"task"`
	Pool      string    `json:"pool,omitempty"`
	Command   []string  `json:"command"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	CreatedAt time.Time `json:"createdAt"`
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
	return &t, nil
}

// WriteTicket creates a ticket file. It is not fsynced: a ticket is void
// without its waiter's lock, and a crash that could lose the write takes
// the waiter with it.
func (s Store) WriteTicket(t *Ticket) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return fmt.Errorf("encode ticket %s: %w", t.RunID, err)
	}
	if err := WriteVolatile(s.TicketPath(t.RunID), append(b, '\n')); err != nil {
		return fmt.Errorf("join the queue: %w", err)
	}
	return nil
}

// TicketEntry is one ticket of the queue; Err is set if it is unreadable.
type TicketEntry struct {
	ID     RunID
	Ticket *Ticket
	Err    error
}

// ListTickets returns the queue's tickets in arrival order.
func (s Store) ListTickets() ([]TicketEntry, error) {
	names, err := ReadDirNames(s.QueueDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the queue: %w", unwrapPath(err))
	}
	var out []TicketEntry
	for _, name := range names {
		idStr, ok := strings.CutSuffix(name, ".json")
		if !ok || IsTempName(name) || !LooksLikeRunID(idStr) {
			continue
		}
		e := TicketEntry{ID: RunID(idStr)}
		data, err := os.ReadFile(filepath.Join(s.QueueDir(), name))
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue // left the queue meanwhile
		case err != nil:
			e.Err = fmt.Errorf("read ticket %s: %w", name, err)
		default:
			e.Ticket, e.Err = DecodeTicket(data)
			if e.Err != nil {
				e.Err = fmt.Errorf("ticket %s: %w", filepath.Join(s.QueueDir(), name), e.Err)
			}
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b TicketEntry) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out, nil
}

// RemoveTicket deletes a ticket's files: the ticket first (so nobody counts
// it any more), then its bell and lock.
func (s Store) RemoveTicket(id RunID) {
	_ = os.Remove(s.TicketPath(id))
	_ = os.Remove(s.BellPath(id))
	_ = os.Remove(s.TicketLockPath(id))
}

// ReadDirNames lists a directory's entry names, unsorted (cheaper than
// os.ReadDir, which stats and sorts).
func ReadDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}
