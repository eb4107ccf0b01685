package runstore

import (
	"io/fs"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/helperproc"
	"github.com/crew-dev/crew/internal/record"
)

func enqueue(t *testing.T, s *Store, id record.RunID, task string) *Waiter {
	t.Helper()
	a := lockAdmission(t, s)
	defer a.Release()
	w, err := a.Enqueue(testTicket(id, task))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Remove)
	return w
}

func waitRung(t *testing.T, w *Waiter) {
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
	first, second := idAt(base, 9), idAt(base.Add(time.Nanosecond), 1)
	// Joined out of order: arrival order is the id order.
	w2 := enqueue(t, s, second, "b")
	w1 := enqueue(t, s, first, "a")
	if w1.ID() != first {
		t.Errorf("ID() = %s", w1.ID())
	}
	for _, id := range []record.RunID{first, second} {
		fi, err := os.Lstat(s.osPath(queueDir, bellName(id)))
		if err != nil || fi.Mode().Type() != fs.ModeNamedPipe {
			t.Errorf("bell of %s: %v, %v; want a FIFO", id, fi, err)
		}
		if !s.HasTicket(id) || s.WaiterState(id) != record.Alive {
			t.Errorf("ticket %s: HasTicket %v, WaiterState %v", id, s.HasTicket(id), s.WaiterState(id))
		}
	}
	ents, err := s.ListTickets()
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
	if !reflect.DeepEqual(ents[0].Ticket, testTicket(first, "a")) {
		t.Errorf("ticket = %+v", ents[0].Ticket)
	}

	// Ringing wakes that waiter and no other.
	s.Ring(second)
	waitRung(t, w2)
	select {
	case <-w1.Rung():
		t.Error("ringing one bell woke another waiter")
	case <-time.After(50 * time.Millisecond):
	}
	// Rung twice before anyone looks: one wake-up is enough, and the ringer
	// never blocks.
	for range 3 {
		s.Ring(first)
	}
	waitRung(t, w1)

	w1.Remove()
	w1.Remove() // harmless
	if s.HasTicket(first) || s.WaiterState(first) != record.Dead {
		t.Errorf("after Remove: HasTicket %v, WaiterState %v", s.HasTicket(first), s.WaiterState(first))
	}
	w2.Remove()
	assertOnlyFiles(t, s.osPath(queueDir))
	ents, err = s.ListTickets()
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
	noReader, missing, file, full := idAt(base, 1), idAt(base, 2), idAt(base, 3), idAt(base, 4)
	mkfifo(t, s.osPath(queueDir, bellName(noReader)))
	writeString(t, s.osPath(queueDir, bellName(file)), "")
	// A reader that never reads: the pipe fills up.
	mkfifo(t, s.osPath(queueDir, bellName(full)))
	// A raw descriptor: an *os.File would park a write to a full pipe in
	// the poller instead of failing with EAGAIN.
	reader, err := unix.Open(s.osPath(queueDir, bellName(full)), unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(reader)
	for _, id := range []record.RunID{noReader, missing, file} {
		if _, err := returnsAtOnce(t, "Ring", func() (struct{}, error) { s.Ring(id); return struct{}{}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if got := readString(t, s.osPath(queueDir, bellName(file))); got != "" {
		t.Errorf("Ring wrote %q into a regular file", got)
	}
	assertMissing(t, s.osPath(queueDir, bellName(missing)))
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
	if _, err := returnsAtOnce(t, "Ring of a full bell", func() (struct{}, error) {
		for range 3 {
			s.Ring(full)
		}
		return struct{}{}, nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestListTicketsReportsBadTickets(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC)
	corrupt, oversized, wrongVersion, linked := idAt(base, 1), idAt(base, 2), idAt(base, 3), idAt(base, 4)
	writeString(t, s.osPath(queueDir, ticketName(corrupt)), "{")
	writeString(t, s.osPath(queueDir, ticketName(oversized)), strings.Repeat(" ", MaxTicketBytes+1))
	writeString(t, s.osPath(queueDir, ticketName(wrongVersion)), `{"version":2}`)
	b, _ := testTicket(linked, "t").Encode()
	outside := t.TempDir() + "/ticket.json"
	writeString(t, outside, string(b))
	if err := os.Symlink(outside, s.osPath(queueDir, ticketName(linked))); err != nil {
		t.Fatal(err)
	}
	// Not tickets: temporary files, foreign names, locks and bells.
	writeString(t, s.osPath(queueDir, "."+ticketName(corrupt)+"0123"), "{")
	writeString(t, s.osPath(queueDir, "notes.json"), "{}")
	writeString(t, s.osPath(queueDir, ticketLockName(corrupt)), "")

	ents, err := returnsAtOnce(t, "ListTickets", func() ([]backend.TicketEntry, error) { return s.ListTickets() })
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
		if !strings.Contains(e.Err.Error(), s.osPath(queueDir, ticketName(e.ID))) {
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
	id := idAt(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), 1)
	w := enqueue(t, s, id, "t")
	a := lockAdmission(t, s)
	if a.RemoveDeadTicket(id) {
		t.Fatal("RemoveDeadTicket removed a living waiter's ticket")
	}
	if !s.HasTicket(id) {
		t.Fatal("ticket gone")
	}
	// The waiter dies without leaving the queue: its lock goes with it.
	w.done = true // keep the cleanup's Remove from running
	_ = w.bell.Close()
	_ = w.lock.Release()
	if !a.RemoveDeadTicket(id) {
		t.Fatal("RemoveDeadTicket kept a dead waiter's ticket")
	}
	assertOnlyFiles(t, s.osPath(queueDir))
	// Nothing left: removing again is still "removed" (it is gone).
	if !a.RemoveDeadTicket(id) {
		t.Error("RemoveDeadTicket of a ticket already gone = false")
	}
}

// Across processes: a waiter in another process is woken by Ring.
func TestRingWakesAnotherProcess(t *testing.T) {
	s := newStore(t)
	id := idAt(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), 1)
	h := startHelper(t, "enqueue", s.Root(), helperID+"="+string(id))
	h.Expect("queued")
	if s.WaiterState(id) != record.Alive {
		t.Errorf("WaiterState = %v, want Alive", s.WaiterState(id))
	}
	s.Ring(id)
	h.Expect("rung")
	h.Send("remove")
	h.Expect("removed")
	assertOnlyFiles(t, s.osPath(queueDir))
}
