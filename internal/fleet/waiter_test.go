//go:build etcd

package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
)

// enqueueOn puts a start of task in line on f, as a waiting crew start
// does, and returns its standing and its place.
func enqueueOn(t *testing.T, f *Fleet, task string) (backend.Starter, backend.Waiter) {
	t.Helper()
	ctx := context.Background()
	st, err := f.Begin(ctx)
	require.NoError(t, err)
	sec, err := st.LockAdmission(ctx, 5*time.Second)
	require.NoError(t, err)
	defer sec.Release()
	now := time.Now().UTC()
	w, err := sec.Enqueue(&record.Ticket{Version: record.TicketVersion, RunID: record.NewRunID(now), Task: task,
		Command: []string{"true"}, Host: "h1", PID: 1, CreatedAt: now})
	require.NoError(t, err)
	return st, w
}

func (f *Fleet) hasTicket(t *testing.T, id record.RunID) bool {
	t.Helper()
	resp, err := f.cli.Get(context.Background(), f.k.ticket(id))
	require.NoError(t, err)
	return len(resp.Kvs) == 1
}

// A waiting start hands its lease to a background waiter (another
// process: here another client): the ticket outlives the start, and the
// waiter that leaves the line leaves its record in the ticket's place.
func TestWaiterHandOverKeepsTheTicket(t *testing.T) {
	f := open(t)
	st, w := enqueueOn(t, f, "bg")
	id := w.ID()
	h := w.HandOver()
	assert.Equal(t, []string{"--store", f.Loc.URL}, h.Store)
	require.Len(t, h.Adopt, 1)

	child := openAs(t, "h1", f.Loc.URL)
	cst, cw, err := child.AdoptWaiter(id, h.Adopt, nil)
	require.NoError(t, err)
	assert.NotNil(t, cw.Changed(), "the adopted waiter watches the store itself")
	w.Release()
	st.Close()
	assert.True(t, f.hasTicket(t, id), "the ticket went with the start that handed it over")

	at, _ := id.CreatedAt()
	rec := &record.Run{Version: record.RecordVersion, RunID: id, Task: "bg", Command: []string{"true"}, Dir: "/",
		Host: "h1", CreatedAt: at, QueuedAt: &at, NeverAdmitted: true}
	exit := 75
	rec.Finish(record.Failed, time.Now().UTC(), &exit, "not admitted: gave up")
	require.NoError(t, cw.LeaveWith(rec))
	cst.Close()
	assert.False(t, f.hasTicket(t, id), "the ticket stayed after the waiter left")
	got, err := f.Runs().ReadRun(id)
	require.NoError(t, err)
	assert.True(t, got.NeverAdmitted)
	assert.Equal(t, record.Failed, got.State)
	require.NotNil(t, got.ExitCode)
	assert.Equal(t, 75, *got.ExitCode)

	// Leaving again finds the ticket gone: its record stands.
	assert.NoError(t, cw.LeaveWith(rec), "a try whose answer was lost is found by its value")
}

// A place whose ticket is not on the lease handed over cannot be taken
// over, and the lease is left to its start.
func TestAdoptWaiterRefusesATicketGone(t *testing.T) {
	f := open(t)
	st, w := enqueueOn(t, f, "bg")
	defer st.Close()
	h := w.HandOver()
	w.Remove()
	_, _, err := f.AdoptWaiter(w.ID(), h.Adopt, nil)
	require.Error(t, err)
	assert.Equal(t, "take over the place in line of "+string(w.ID())+": its ticket is gone (its lease expired, or it left the queue)", err.Error())
	_, _, err = f.AdoptWaiter(w.ID(), nil, nil)
	assert.EqualError(t, err, "waiting start "+string(w.ID())+": 0 values handed over, want its lease")
}
