package dispatch_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/record"
)

// countingStore counts the tickets its queue reads for the dispatcher.
type countingStore struct {
	backend.Store
	read *int
}

func (s countingStore) Queue() backend.Queue { return countingQueue{s.Store.Queue(), s.read} }

type countingQueue struct {
	backend.Queue
	read *int
}

func (q countingQueue) ListTicketsUntil(enough backend.Enough) ([]backend.TicketEntry, error) {
	ents, err := q.Queue.ListTicketsUntil(enough)
	*q.read = len(ents)
	return ents, err
}

// A ring reads the line only as far as the caps let anyone in (issue 25:
// every finish read every ticket of the queue, and so did every waiter
// deciding for itself): with every slot held, one ticket; with one slot
// free, the waiter it goes to.
func TestARingReadsTheLineOnlyAsFarAsTheCapsLetAnyoneIn(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	holder := admit(t, d, "holder")
	var ws []backend.Waiter
	for i := range 5 {
		ws = append(ws, joinLine(t, d, fmt.Sprint("w", i)))
	}
	read := 0
	counted := dispatch.Over(countingStore{d.Store, &read}, d.Logs, d.Host)

	counted.RingWaiters()
	assert.Equal(t, 1, read, "tickets read with every slot held")
	finishQuietly(t, holder)
	counted.RingWaiters()
	assert.Equal(t, 1, read, "tickets read with one slot free")
	select {
	case <-ws[0].Rung():
	case <-time.After(10 * time.Second):
		t.Fatal("the head of the line was not rung")
	}
	for i, w := range ws[1:] {
		select {
		case <-w.Rung():
			t.Errorf("waiter %d behind the head was rung", i+1)
		default:
		}
	}
}

// joinLine puts a waiting start of task in line on d's store, as crew
// start --wait does, and returns its place; it leaves when the test ends.
func joinLine(t *testing.T, d *dispatch.Dispatcher, task string) backend.Waiter {
	t.Helper()
	ctx := context.Background()
	st, err := d.Store.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	sec, err := st.LockAdmission(ctx, 5*time.Second)
	require.NoError(t, err)
	defer sec.Release()
	now := time.Now().UTC()
	w, err := sec.Enqueue(&record.Ticket{Version: record.TicketVersion, RunID: record.NewRunID(now), Task: task,
		Command: []string{"true"}, Host: "h1", PID: os.Getpid(), CreatedAt: now})
	require.NoError(t, err)
	t.Cleanup(w.Remove)
	return w
}
