package runlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
)

// A run's log is also the lock that keeps it from being pruned while
// someone waits for it. crew wait and crew logs -f hold a shared flock of
// the log from the first look at which it exists (it is made when the run
// launches, before its command starts), and look at the record only
// while they hold it; a prune (runstore's RemoveFinished) takes an
// exclusive flock of the log, without waiting, before it removes anything
// (LockToRemove), and leaves the run alone if it cannot. So a waiter that
// saw the run running reads its final record, however long it was away
// (stopped, descheduled) and however many runs finished and pruned
// meanwhile: a waiter holds no timing window, only a lock, which the
// kernel drops if it dies.

// ErrBusy: a run's log is held the other way (a waiter holds it, or a
// prune is removing the run).
var ErrBusy = errors.New("run is locked by a living process")

// Hold is a waiter's shared lock on a run's log.
type Hold struct {
	lock *lockfs.Lock
}

// HoldLog takes a shared lock on run id's log. fs.ErrNotExist: the run
// has no log (yet, or any more); ErrBusy: a prune is removing it.
func (l *Logs) HoldLog(id record.RunID) (*Hold, error) {
	lk, err := l.lockLog(id, false)
	switch {
	case err != nil:
		return nil, err
	case lk == nil:
		return nil, fmt.Errorf("lock the log of run %s: %w", id, fs.ErrNotExist)
	}
	return &Hold{lock: lk}, nil
}

// Current reports whether the held file is still the run's log: a log
// planted ahead of the run is moved aside when the run launches, and its
// waiter must hold the real one.
func (h *Hold) Current() bool {
	same, err := h.lock.StillAtName()
	return err == nil && same
}

// Release lets the run be pruned again.
func (h *Hold) Release() {
	if h != nil && h.lock != nil {
		_ = h.lock.Release()
		h.lock = nil
	}
}

// LockToRemove takes the exclusive lock a prune needs on a run's log
// before it removes the run: ErrBusy if a waiter holds it. Without a log, or with
// something at its name that crew does not open (a waiter could not lock
// it either), there is nothing to hold: nil, nil. Release the lock once
// the run is removed.
func (l *Logs) LockToRemove(id record.RunID) (*lockfs.Lock, error) {
	return l.lockLog(id, true)
}

// lockLog locks run id's log, shared or exclusive, without waiting:
// ErrBusy if it is held the other way; nil, nil if there is no log crew
// could open.
func (l *Logs) lockLog(id record.RunID, exclusive bool) (*lockfs.Lock, error) {
	dir, err := l.dir.Open()
	if err != nil {
		return nil, nil
	}
	defer dir.Close()
	f, err := rootfs.Open(dir, logName(id), os.O_RDONLY, 0)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	lk, err := lockfs.LockData(dir, logName(id), f, exclusive, 0)
	switch {
	case errors.Is(err, lockfs.ErrTimeout):
		return nil, ErrBusy
	case errors.Is(err, lockfs.ErrGone):
		return nil, nil // removed or replaced between the open and the lock
	case err != nil:
		return nil, fmt.Errorf("lock the log of run %s: %w", id, err)
	}
	return lk, nil
}
