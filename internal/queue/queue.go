// Package queue keeps the queue of waiting starts (crew start --wait) in a
// state root's queue/ directory: each waiting start's ticket, the lock its
// waiting process holds (a dead waiter's ticket is void), and the FIFO
// bell it sleeps on. Arrival order is the admission lock's order, so a
// ticket joins the queue only inside it (package runstore's
// Admission.Enqueue). It reaches queue/ only through the handle package
// runstore gives it (stateroot.Dir).
package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
	"github.com/crew-dev/crew/internal/stateroot"
)

// TicketName, LockName and BellName name the three files a waiting start
// (--wait) has in queue/: its ticket, the lock its waiting process holds
// (a dead waiter's ticket is void), and the FIFO bell it sleeps on.
func TicketName(id record.RunID) string { return string(id) + ".json" }
func LockName(id record.RunID) string   { return string(id) + ".lock" }
func BellName(id record.RunID) string   { return string(id) + ".bell" }

// MaxTicketBytes bounds a ticket file: as large as a run record may be
// (runstore.MaxRecordBytes).
const MaxTicketBytes = 1 << 20

// Queue is a state root's queue/ directory.
type Queue struct {
	dir stateroot.Dir
}

// New returns the queue kept in dir (the state root's queue/).
func New(dir stateroot.Dir) *Queue { return &Queue{dir: dir} }

// ListTickets returns the queue's tickets in arrival order, each with its
// waiter's liveness.
func (q *Queue) ListTickets() ([]backend.TicketEntry, error) { return q.ListTicketsUntil(nil) }

// ListTicketsUntil is ListTickets that reads tickets (and probes their
// waiters) in arrival order only until enough says so: the names are
// listed whole, the files only that far.
func (q *Queue) ListTicketsUntil(enough backend.Enough) ([]backend.TicketEntry, error) {
	dir, err := q.dir.Open()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the queue: %w", err)
	}
	defer dir.Close()
	names, err := q.dir.List(dir)
	if err == nil {
		err = failpoint.Error(failpoint.QueueList)
	}
	if err != nil {
		return nil, fmt.Errorf("list the queue in %s: %w", q.dir.Path(), stateroot.UnwrapPath(err))
	}
	ids := make([]record.RunID, 0, len(names))
	for _, name := range names {
		idStr, ok := strings.CutSuffix(name, ".json")
		if ok && !stateroot.IsTempName(name) && record.LooksLikeRunID(idStr) {
			ids = append(ids, record.RunID(idStr))
		}
	}
	slices.Sort(ids)
	var out []backend.TicketEntry
	for _, id := range ids {
		name := TicketName(id)
		e := backend.TicketEntry{ID: id, Path: q.dir.Path(name)}
		data, err := rootfs.ReadFile(dir, name, MaxTicketBytes)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // left the queue meanwhile
		case err != nil:
			e.Err = fmt.Errorf("ticket %s: %w", q.dir.Path(name), stateroot.UnwrapPath(err))
		default:
			e.Ticket, e.Err = record.DecodeTicket(data)
			if e.Err != nil {
				e.Err = fmt.Errorf("ticket %s: %w", q.dir.Path(name), e.Err)
			}
		}
		e.Waiter, _ = q.dir.Probe(dir, LockName(e.ID))
		out = append(out, e)
		if enough != nil && enough(out) {
			break
		}
	}
	return out, nil
}

// QueuePath is where the queue's tickets are, for messages.
func (q *Queue) QueuePath() string { return q.dir.Path() }

// TicketPath is where ticket id is, for messages.
func (q *Queue) TicketPath(id record.RunID) string { return q.dir.Path(TicketName(id)) }

// WaiterState says whether the start waiting under ticket id still lives.
func (q *Queue) WaiterState(id record.RunID) record.Liveness {
	dir, err := q.dir.Open()
	if errors.Is(err, fs.ErrNotExist) {
		return record.Dead
	}
	if err != nil {
		return record.Unknown
	}
	defer dir.Close()
	l, _ := q.dir.Probe(dir, LockName(id))
	return l
}

// HasTicket reports whether the queue holds a ticket with this id.
func (q *Queue) HasTicket(id record.RunID) bool {
	dir, err := q.dir.Open()
	if err != nil {
		return false
	}
	defer dir.Close()
	_, err = dir.Lstat(TicketName(id))
	return err == nil
}

// Waiter is this process's place in the queue: the ticket, the lock that
// keeps it valid, and the bell it sleeps on.
type Waiter struct {
	q    *Queue
	id   record.RunID
	lock *lockfs.Lock
	bell *os.File
	rung chan struct{}
	done bool
}

// Enqueue puts t in the queue. The caller holds the admission lock, which
// is what makes arrival order total (package runstore's Admission.Enqueue
// is the one caller). The lock and the bell exist before
// the ticket does, so a visible ticket is always valid and wakeable. The
// ticket is written atomically, but its directory is not fsynced: it is
// void without its waiter, and a crash that could lose the rename takes
// the waiter with it.
func (q *Queue) Enqueue(t *record.Ticket) (*Waiter, error) {
	dir, err := q.dir.Open()
	if err != nil {
		return nil, fmt.Errorf("join the queue: %w", err)
	}
	defer dir.Close()
	lock, err := q.publishLock(dir, LockName(t.RunID))
	if err != nil {
		return nil, fmt.Errorf("join the queue in %s: %w", q.dir.Path(), stateroot.UnwrapPath(err))
	}
	if err := rootfs.Mkfifo(dir, BellName(t.RunID), q.dir.FilePerm()); err != nil {
		_ = lock.RemoveAndRelease()
		return nil, fmt.Errorf("join the queue in %s: %w", q.dir.Path(), stateroot.UnwrapPath(err))
	}
	// Opened for reading and writing so that it never reports end of file
	// and opening never blocks.
	bell, err := rootfs.OpenFIFO(dir, BellName(t.RunID), os.O_RDWR)
	if err != nil {
		_ = q.dir.Remove(dir, BellName(t.RunID))
		_ = lock.RemoveAndRelease()
		return nil, fmt.Errorf("join the queue in %s: %w", q.dir.Path(), stateroot.UnwrapPath(err))
	}
	w := &Waiter{q: q, id: t.RunID, lock: lock, bell: bell, rung: make(chan struct{}, 1)}
	b, err := t.Encode()
	if err == nil {
		err = q.dir.ReplaceFile(dir, TicketName(t.RunID), b)
	}
	if err != nil {
		w.Remove()
		return nil, fmt.Errorf("join the queue in %s: %w", q.dir.Path(), stateroot.UnwrapPath(err))
	}
	go w.listen()
	return w, nil
}

// publishLock makes the waiter's lock appear at name already locked, so
// that nobody can lock it before its waiter does, on a descriptor of its
// own that a background waiter can inherit (HandOver): it is created and
// locked under a temporary name, given the state root's file mode (in a
// root shared with a group every member probes it), then linked at name.
func (q *Queue) publishLock(dir *os.Root, name string) (*lockfs.Lock, error) {
	l, err := lockfs.Create(dir, q.dir.TempName(name))
	if err != nil {
		return nil, err
	}
	if err := l.File().Chmod(q.dir.FilePerm()); err != nil {
		_ = l.RemoveAndRelease()
		return nil, fmt.Errorf("set the mode of lock %s: %w", name, err)
	}
	if err := l.Publish(name); err != nil {
		_ = l.RemoveAndRelease()
		return nil, err
	}
	return l, nil
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
	if dir, err := w.q.dir.Open(); err == nil {
		_ = w.q.dir.Remove(dir, TicketName(w.id))
		_ = w.q.dir.Remove(dir, BellName(w.id))
		dir.Close()
	}
	_ = w.bell.Close()
	_ = w.lock.RemoveAndRelease()
}

// Files are the waiter's lock and its bell, for a background waiter to
// inherit (AdoptWaiter takes them back): the place in line is held by the
// lock's open file description, which the two processes then share, and
// the bell's bytes wait in the FIFO for its reader. From now on this
// process reads the bell no more, so that a ring is the background
// waiter's: neither the place nor a ring is lost in the handover.
func (w *Waiter) Files() []*os.File {
	_ = w.bell.SetReadDeadline(time.Now()) // listen returns; the FIFO keeps what comes
	return []*os.File{w.lock.File(), w.bell}
}

// Release lets go of this process's hold on the place in line without
// leaving it: a background waiter that inherited Files holds it now.
func (w *Waiter) Release() {
	if w.done {
		return
	}
	w.done = true
	_ = w.bell.Close()
	_ = w.lock.Release()
}

// AdoptWaiter takes over the place in line of ticket id, whose lock and
// bell this process inherited (Files): the lock is held already (its open
// file description is the one its parent locked), and both must still be
// the files at their names.
func (q *Queue) AdoptWaiter(id record.RunID, lock, bell *os.File) (*Waiter, error) {
	dir, err := q.dir.Open()
	if err != nil {
		return nil, fmt.Errorf("take over the place in line of %s: %w", id, err)
	}
	defer dir.Close()
	if _, err := dir.Lstat(TicketName(id)); err != nil {
		return nil, fmt.Errorf("take over the place in line of %s: its ticket: %w", id, stateroot.UnwrapPath(err))
	}
	if err := sameFile(dir, BellName(id), bell); err != nil {
		return nil, fmt.Errorf("take over the place in line of %s: %w", id, err)
	}
	l, err := lockfs.Adopt(lock, dir, LockName(id))
	if err != nil {
		return nil, fmt.Errorf("take over the place in line of %s: %w", id, err)
	}
	w := &Waiter{q: q, id: id, lock: l, bell: bell, rung: make(chan struct{}, 1)}
	go w.listen()
	return w, nil
}

// sameFile checks that f, an inherited descriptor, is the file at name.
func sameFile(dir *os.Root, name string, f *os.File) error {
	held, err := f.Stat()
	if err != nil {
		return fmt.Errorf("inherited descriptor %d: %w", f.Fd(), err)
	}
	now, err := dir.Lstat(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, stateroot.UnwrapPath(err))
	}
	if !os.SameFile(held, now) {
		return fmt.Errorf("inherited descriptor %d is not %s", f.Fd(), name)
	}
	return nil
}

// Ring wakes the waiter of ticket id, without ever blocking: a full bell
// has been rung already, and a bell with no reader belongs to a dead
// waiter. Anything but a FIFO at the bell's name is left alone.
func (q *Queue) Ring(id record.RunID) {
	dir, err := q.dir.Open()
	if err != nil {
		return
	}
	defer dir.Close()
	f, err := rootfs.OpenFIFO(dir, BellName(id), os.O_WRONLY)
	if err != nil {
		return
	}
	_, _ = unix.Write(int(f.Fd()), []byte{1})
	_ = f.Close()
}

// RemoveDeadTicket removes the files of a ticket whose waiter is gone, and
// reports whether it did. A waiter removes its own ticket before its lock,
// so a free lock means the waiter is gone; taking that lock first keeps
// two cleaners from removing files under each other. The caller holds
// the admission lock.
func (q *Queue) RemoveDeadTicket(id record.RunID) bool {
	dir, err := q.dir.Open()
	if err != nil {
		return false
	}
	defer dir.Close()
	l, err := lockfs.Take(dir, LockName(id))
	switch {
	case err == nil:
		_ = q.dir.Remove(dir, TicketName(id))
		_ = q.dir.Remove(dir, BellName(id))
		_ = l.RemoveAndRelease()
		return true
	case errors.Is(err, lockfs.ErrGone):
		_ = q.dir.Remove(dir, TicketName(id))
		_ = q.dir.Remove(dir, BellName(id))
		return true
	default:
		return false // a living waiter holds it
	}
}
