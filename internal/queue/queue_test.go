package queue_test

import (
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/helperproc"
	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/storetest"
)

func waitRung(t *testing.T, w *queue.Waiter) {
	t.Helper()
	select {
	case <-w.Rung():
	case <-time.After(helperproc.LineTimeout):
		t.Fatalf("waiter %s was not woken within %s", w.ID(), helperproc.LineTimeout)
	}
}

func TestEnqueueListRingRemove(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC)
	first, second := storetest.IDAt(base, 9), storetest.IDAt(base.Add(time.Nanosecond), 1)
	// Joined out of order: arrival order is the id order.
	w2 := enqueue(t, s, second, "b")
	w1 := enqueue(t, s, first, "a")
	if w1.ID() != first {
		t.Errorf("ID() = %s", w1.ID())
	}
	for _, id := range []record.RunID{first, second} {
		fi, err := os.Lstat(osPath(s, "queue", queue.BellName(id)))
		if err != nil || fi.Mode().Type() != fs.ModeNamedPipe {
			t.Errorf("bell of %s: %v, %v; want a FIFO", id, fi, err)
		}
		if !s.Queue().HasTicket(id) || s.Queue().WaiterState(id) != record.Alive {
			t.Errorf("ticket %s: HasTicket %v, WaiterState %v", id, s.Queue().HasTicket(id), s.Queue().WaiterState(id))
		}
	}
	ents, err := s.Queue().ListTickets()
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 || ents[0].ID != first || ents[1].ID != second {
		t.Fatalf("ListTickets = %+v, want %s then %s", ents, first, second)
	}
	for i, e := range ents {
		if e.Err != nil || e.Waiter != record.Alive || e.Ticket == nil || e.Ticket.Task != []string{"a", "b"}[i] {
			t.Errorf("entry %d = %+v", i, e)
		}
	}
	if !reflect.DeepEqual(ents[0].Ticket, storetest.Ticket(first, "a")) {
		t.Errorf("ticket = %+v", ents[0].Ticket)
	}

	// Ringing wakes that waiter and no other.
	s.Queue().Ring(second)
	waitRung(t, w2)
	select {
	case <-w1.Rung():
		t.Error("ringing one bell woke another waiter")
	case <-time.After(50 * time.Millisecond):
	}
	// Rung twice before anyone looks: one wake-up is enough, and the ringer
	// never blocks.
	for range 3 {
		s.Queue().Ring(first)
	}
	waitRung(t, w1)

	w1.Remove()
	w1.Remove() // harmless
	if s.Queue().HasTicket(first) || s.Queue().WaiterState(first) != record.Dead {
		t.Errorf("after Remove: HasTicket %v, WaiterState %v", s.Queue().HasTicket(first), s.Queue().WaiterState(first))
	}
	w2.Remove()
	storetest.AssertOnlyFiles(t, osPath(s, "queue"))
	ents, err = s.Queue().ListTickets()
	if err != nil || len(ents) != 0 {
		t.Errorf("ListTickets after both left = %+v, %v", ents, err)
	}
}

// Ring never blocks and never writes into anything but a FIFO: a bell
// with no reader belongs to a dead waiter, a missing bell to none, and a
// regular file planted at the name is left alone.
func TestRingNeverBlocks(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC)
	noReader, missing, file, full := storetest.IDAt(base, 1), storetest.IDAt(base, 2), storetest.IDAt(base, 3), storetest.IDAt(base, 4)
	storetest.Mkfifo(t, osPath(s, "queue", queue.BellName(noReader)))
	storetest.WriteString(t, osPath(s, "queue", queue.BellName(file)), "")
	// A reader that never reads: the pipe fills up.
	storetest.Mkfifo(t, osPath(s, "queue", queue.BellName(full)))
	// A raw descriptor: an *os.File would park a write to a full pipe in
	// the poller instead of failing with EAGAIN.
	reader, err := unix.Open(osPath(s, "queue", queue.BellName(full)), unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(reader)
	for _, id := range []record.RunID{noReader, missing, file} {
		if _, err := storetest.ReturnsAtOnce(t, "Ring", func() (struct{}, error) { s.Queue().Ring(id); return struct{}{}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if got := storetest.ReadString(t, osPath(s, "queue", queue.BellName(file))); got != "" {
		t.Errorf("Ring wrote %q into a regular file", got)
	}
	storetest.AssertMissing(t, osPath(s, "queue", queue.BellName(missing)))
	// A bell rung more often than a pipe holds, while nobody reads it:
	// never blocks. Fill the pipe first, then ring.
	chunk := make([]byte, 4096)
	for {
		if _, err := unix.Write(reader, chunk); err != nil {
			if err != unix.EAGAIN {
				t.Fatal(err)
			}
			break // full
		}
	}
	if _, err := storetest.ReturnsAtOnce(t, "Ring of a full bell", func() (struct{}, error) {
		for range 3 {
			s.Queue().Ring(full)
		}
		return struct{}{}, nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestListTicketsReportsBadTickets(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC)
	corrupt, oversized, wrongVersion, linked := storetest.IDAt(base, 1), storetest.IDAt(base, 2), storetest.IDAt(base, 3), storetest.IDAt(base, 4)
	storetest.WriteString(t, osPath(s, "queue", queue.TicketName(corrupt)), "{")
	storetest.WriteString(t, osPath(s, "queue", queue.TicketName(oversized)), strings.Repeat(" ", queue.MaxTicketBytes+1))
	storetest.WriteString(t, osPath(s, "queue", queue.TicketName(wrongVersion)), `{"version":2}`)
	b, _ := storetest.Ticket(linked, "t").Encode()
	outside := t.TempDir() + "/ticket.json"
	storetest.WriteString(t, outside, string(b))
	if err := os.Symlink(outside, osPath(s, "queue", queue.TicketName(linked))); err != nil {
		t.Fatal(err)
	}
	// Not tickets: temporary files, foreign names, locks and bells.
	storetest.WriteString(t, osPath(s, "queue", "."+queue.TicketName(corrupt)+"0123"), "{")
	storetest.WriteString(t, osPath(s, "queue", "notes.json"), "{}")
	storetest.WriteString(t, osPath(s, "queue", queue.LockName(corrupt)), "")

	ents, err := storetest.ReturnsAtOnce(t, "ListTickets", func() ([]backend.TicketEntry, error) { return s.Queue().ListTickets() })
	if err != nil {
		t.Fatal(err)
	}
	want := []record.RunID{corrupt, oversized, wrongVersion, linked}
	if len(ents) != len(want) {
		t.Fatalf("ListTickets = %+v, want %d entries", ents, len(want))
	}
	for i, e := range ents {
		if e.ID != want[i] || e.Err == nil || e.Ticket != nil {
			t.Errorf("entry %d = %+v, want %s with an error", i, e, want[i])
			continue
		}
		if !strings.Contains(e.Err.Error(), osPath(s, "queue", queue.TicketName(e.ID))) {
			t.Errorf("error %q does not name the ticket", e.Err)
		}
		if e.Waiter != record.Dead {
			t.Errorf("entry %s waiter %v, want Dead (no one holds its lock)", e.ID, e.Waiter)
		}
	}
}

// RemoveDeadTicket removes a ticket only once its waiter is gone.
func TestRemoveDeadTicket(t *testing.T) {
	s := newStore(t)
	id := storetest.IDAt(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), 1)
	w := enqueue(t, s, id, "t")
	a := lockAdmission(t, s)
	if a.RemoveDeadTicket(id) {
		t.Fatal("RemoveDeadTicket removed a living waiter's ticket")
	}
	if !s.Queue().HasTicket(id) {
		t.Fatal("ticket gone")
	}
	// The waiter dies without leaving the queue: its lock goes with it.
	queue.Die(w)
	if !a.RemoveDeadTicket(id) {
		t.Fatal("RemoveDeadTicket kept a dead waiter's ticket")
	}
	storetest.AssertOnlyFiles(t, osPath(s, "queue"))
	// Nothing left: removing again is still "removed" (it is gone).
	if !a.RemoveDeadTicket(id) {
		t.Error("RemoveDeadTicket of a ticket already gone = false")
	}
}

// Across processes: a waiter in another process is woken by Ring.
func TestRingWakesAnotherProcess(t *testing.T) {
	s := newStore(t)
	id := storetest.IDAt(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), 1)
	h := helperproc.Start(t, []string{helperEnv + "=enqueue:" + s.Root(), helperID + "=" + string(id)})
	h.Expect("queued")
	if s.Queue().WaiterState(id) != record.Alive {
		t.Errorf("WaiterState = %v, want Alive", s.Queue().WaiterState(id))
	}
	s.Queue().Ring(id)
	h.Expect("rung")
	h.Send("remove")
	h.Expect("removed")
	storetest.AssertOnlyFiles(t, osPath(s, "queue"))
}

// ListTicketsUntil reads the queue in arrival order only as far as its
// reader wants: a ticket past that point is not even opened, so one that
// cannot be read there is no error of this listing's.
func TestListTicketsUntilReadsOnlyAsFarAsWanted(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC)
	var ids []record.RunID
	for i := range 4 {
		id := storetest.IDAt(base.Add(time.Duration(i)*time.Second), 1)
		ids = append(ids, id)
		enqueue(t, s, id, fmt.Sprint("t", i))
	}
	// The last ticket cannot be read: its file is a directory now.
	last := osPath(s, "queue", queue.TicketName(ids[3]))
	if err := os.Remove(last); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(last, 0o700); err != nil {
		t.Fatal(err)
	}
	calls := 0
	ents, err := s.Queue().ListTicketsUntil(func(read []backend.TicketEntry) bool {
		calls++
		return read[len(read)-1].ID == ids[1]
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 || ents[0].ID != ids[0] || ents[1].ID != ids[1] || calls != 2 {
		t.Fatalf("ListTicketsUntil = %+v after %d calls, want %s and %s after 2", ents, calls, ids[0], ids[1])
	}
	for _, e := range ents {
		if e.Err != nil || e.Waiter != record.Alive {
			t.Errorf("entry %+v", e)
		}
	}
	all, err := s.Queue().ListTickets()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 || all[3].Err == nil {
		t.Fatalf("ListTickets = %+v, want 4 tickets, the last unreadable", all)
	}
}
