package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
)

// A waiting start (--wait) has three files in queue/: its ticket, the lock
// its waiting process holds (a dead waiter's ticket is void), and the FIFO
// bell it sleeps on.
func ticketName(id record.RunID) string     { return string(id) + ".json" }
func ticketLockName(id record.RunID) string { return string(id) + ".lock" }
func bellName(id record.RunID) string       { return string(id) + ".bell" }

// MaxTicketBytes bounds a ticket file.
const MaxTicketBytes = MaxRecordBytes

// ListTickets returns the queue's tickets in arrival order, each with its
// waiter's liveness.
func (s *Store) ListTickets() ([]backend.TicketEntry, error) {
	dir, err := s.dir(queueDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the queue: %w", err)
	}
	defer dir.Close()
	names, err := listNames(dir)
	if err == nil {
		err = failpoint.Error(failpoint.QueueList)
	}
	if err != nil {
		return nil, fmt.Errorf("list the queue in %s: %w", s.display(queueDir), unwrapPath(err))
	}
	var out []backend.TicketEntry
	for _, name := range names {
		idStr, ok := strings.CutSuffix(name, ".json")
		if !ok || IsTempName(name) || !record.LooksLikeRunID(idStr) {
			continue
		}
		e := backend.TicketEntry{ID: record.RunID(idStr), Path: s.display(queueDir, name)}
		data, err := rootfs.ReadFile(dir, name, MaxTicketBytes)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // left the queue meanwhile
		case err != nil:
			e.Err = fmt.Errorf("ticket %s: %w", s.display(queueDir, name), unwrapPath(err))
		default:
			e.Ticket, e.Err = record.DecodeTicket(data)
			if e.Err != nil {
				e.Err = fmt.Errorf("ticket %s: %w", s.display(queueDir, name), e.Err)
			}
		}
		e.Waiter, _ = probe(dir, ticketLockName(e.ID))
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b backend.TicketEntry) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out, nil
}

// QueuePath is where the queue's tickets are, for messages.
func (s *Store) QueuePath() string { return s.display(queueDir) }

// TicketPath is where ticket id is, for messages.
func (s *Store) TicketPath(id record.RunID) string { return s.display(queueDir, ticketName(id)) }

// WaiterState says whether the start waiting under ticket id still lives.
func (s *Store) WaiterState(id record.RunID) record.Liveness {
	dir, err := s.dir(queueDir)
	if errors.Is(err, fs.ErrNotExist) {
		return record.Dead
	}
	if err != nil {
		return record.Unknown
	}
	defer dir.Close()
	l, _ := probe(dir, ticketLockName(id))
	return l
}

// HasTicket reports whether the queue holds a ticket with this id.
func (s *Store) HasTicket(id record.RunID) bool {
	dir, err := s.dir(queueDir)
	if err != nil {
		return false
	}
	defer dir.Close()
	_, err = dir.Lstat(ticketName(id))
	return err == nil
}

// Waiter is this process's place in the queue: the ticket, the lock that
// keeps it valid, and the bell it sleeps on.
type Waiter struct {
	s    *Store
	id   record.RunID
	lock *lockfs.Lock
	bell *os.File
	rung chan struct{}
	done bool
}

// Enqueue puts t in the queue. The caller holds the admission lock, which
// is what makes arrival order total. The lock and the bell exist before
// the ticket does, so a visible ticket is always valid and wakeable. The
// ticket is written atomically, but its directory is not fsynced: it is
// void without its waiter, and a crash that could lose the rename takes
// the waiter with it.
func (a *Admission) Enqueue(t *record.Ticket) (*Waiter, error) {
	s := a.s
	dir, err := s.dir(queueDir)
	if err != nil {
		return nil, fmt.Errorf("join the queue: %w", err)
	}
	defer dir.Close()
	lock, err := s.publishLock(dir, ticketLockName(t.RunID))
	if err != nil {
		return nil, fmt.Errorf("join the queue in %s: %w", s.display(queueDir), unwrapPath(err))
	}
	if err := rootfs.Mkfifo(dir, bellName(t.RunID), s.filePerm()); err != nil {
		_ = lock.RemoveAndRelease()
		return nil, fmt.Errorf("join the queue in %s: %w", s.display(queueDir), unwrapPath(err))
	}
	// Opened for reading and writing so that it never reports end of file
	// and opening never blocks.
	bell, err := rootfs.OpenFIFO(dir, bellName(t.RunID), os.O_RDWR)
	if err != nil {
		_ = removeFile(dir, bellName(t.RunID))
		_ = lock.RemoveAndRelease()
		return nil, fmt.Errorf("join the queue in %s: %w", s.display(queueDir), unwrapPath(err))
	}
	w := &Waiter{s: s, id: t.RunID, lock: lock, bell: bell, rung: make(chan struct{}, 1)}
	b, err := t.Encode()
	if err == nil {
		err = s.replaceFile(queueDir, dir, ticketName(t.RunID), b, atomic)
	}
	if err != nil {
		w.Remove()
		return nil, fmt.Errorf("join the queue in %s: %w", s.display(queueDir), unwrapPath(err))
	}
	go w.listen()
	return w, nil
}

// ID is the ticket's id: the run id the run will have once admitted.
func (w *Waiter) ID() record.RunID { return w.id }

// Rung delivers a value whenever someone rang this waiter's bell.
func (w *Waiter) Rung() <-chan struct{} { return w.rung }

// listen turns bytes on the bell into wake-ups until the bell is closed.
func (w *Waiter) listen() {
	buf := make([]byte, 64)
	for {
		if _, err := w.bell.Read(buf); err != nil {
			return
		}
		select {
		case w.rung <- struct{}{}:
		default:
		}
	}
}

// Remove takes the ticket out of the queue: the ticket first (so nobody
// counts it any more), then its bell, and its lock last. Removing twice is
// harmless.
func (w *Waiter) Remove() {
	if w.done {
		return
	}
	w.done = true
	if dir, err := w.s.dir(queueDir); err == nil {
		_ = removeFile(dir, ticketName(w.id))
		_ = removeFile(dir, bellName(w.id))
		dir.Close()
	}
	_ = w.bell.Close()
	_ = w.lock.RemoveAndRelease()
}

// Ring wakes the waiter of ticket id, without ever blocking: a full bell
// has been rung already, and a bell with no reader belongs to a dead
// waiter. Anything but a FIFO at the bell's name is left alone.
func (s *Store) Ring(id record.RunID) {
	dir, err := s.dir(queueDir)
	if err != nil {
		return
	}
	defer dir.Close()
	f, err := rootfs.OpenFIFO(dir, bellName(id), os.O_WRONLY)
	if err != nil {
		return
	}
	_, _ = unix.Write(int(f.Fd()), []byte{1})
	_ = f.Close()
}

// RemoveDeadTicket removes the files of a ticket whose waiter is gone, and
// reports whether it did. A waiter removes its own ticket before its lock,
// so a free lock means the waiter is gone; taking that lock first keeps
// two cleaners from removing files under each other.
func (a *Admission) RemoveDeadTicket(id record.RunID) bool {
	return a.s.removeDeadTicket(id)
}

func (s *Store) removeDeadTicket(id record.RunID) bool {
	dir, err := s.dir(queueDir)
	if err != nil {
		return false
	}
	defer dir.Close()
	l, err := lockfs.Take(dir, ticketLockName(id))
	switch {
	case err == nil:
		_ = removeFile(dir, ticketName(id))
		_ = removeFile(dir, bellName(id))
		_ = l.RemoveAndRelease()
		return true
	case errors.Is(err, lockfs.ErrGone):
		_ = removeFile(dir, ticketName(id))
		_ = removeFile(dir, bellName(id))
		return true
	default:
		return false // a living waiter holds it
	}
}
