package runstore

import (
	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
)

// The queue's writes that need the admission lock: joining it, which is
// what makes arrival order total, and removing a dead waiter's ticket.

// Enqueue puts t in the queue (queue.Queue.Enqueue). The lock and the bell
// exist before the ticket does, so a visible ticket is always valid and
// wakeable.
func (a *Admission) Enqueue(t *record.Ticket) (*queue.Waiter, error) {
	return a.s.queue.Enqueue(t)
}

// RemoveDeadTicket removes the files of a ticket whose waiter is gone, and
// reports whether it did (queue.Queue.RemoveDeadTicket).
func (a *Admission) RemoveDeadTicket(id record.RunID) bool {
	return a.s.queue.RemoveDeadTicket(id)
}
