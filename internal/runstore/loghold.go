package runstore

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
// while they hold it; RemoveFinished takes an exclusive flock of the log,
// without waiting, before it removes anything, and leaves the run alone
// (ErrRunBusy) if it cannot. So a waiter that saw the run running reads
// its final record, however long it was away (stopped, descheduled)
// and however many runs finished and pruned meanwhile: a waiter holds no
// timing window, only a lock, which the kernel drops if it dies.

// LogHold is a waiter's shared lock on a run's log.
type LogHold struct {
	lock *lockfs.Lock
}

// HoldLog takes a shared lock on run id's log. fs.ErrNotExist: the run
// has no log (yet, or any more); ErrRunBusy: a prune is removing it.
func (s *Store) HoldLog(id record.RunID) (*LogHold, error) {
	l, err := s.lockLog(id, false)
	switch {
	case err != nil:
		return nil, err
	case l == nil:
		return nil, fmt.Errorf("lock the log of run %s: %w", id, fs.ErrNotExist)
	}
	return &LogHold{lock: l}, nil
}

// Current reports whether the held file is still the run's log: a log
// planted ahead of the run is moved aside when the run launches, and its
// waiter must hold the real one.
func (h *LogHold) Current() bool {
	same, err := h.lock.StillAtName()
	return err == nil && same
}

// Release lets the run be pruned again.
func (h *LogHold) Release() {
	if h != nil && h.lock != nil {
		_ = h.lock.Release()
		h.lock = nil
	}
}

// lockLogToRemove takes the exclusive lock RemoveFinished needs on a
// run's log: ErrRunBusy if a waiter holds it. Without a log, or with
// something at its name that crew does not open (a waiter could not lock
// it either), there is nothing to hold: nil, nil. Release the lock once
// the run is removed.
func (s *Store) lockLogToRemove(id record.RunID) (*lockfs.Lock, error) {
	return s.lockLog(id, true)
}

// lockLog locks run id's log, shared or exclusive, without waiting:
// ErrRunBusy if it is held the other way; nil, nil if there is no log crew
// could open.
func (s *Store) lockLog(id record.RunID, exclusive bool) (*lockfs.Lock, error) {
	dir, err := s.dir(logsDir)
	if err != nil {
		return nil, nil
	}
	defer dir.Close()
	f, err := rootfs.Open(dir, logName(id), os.O_RDONLY, 0)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	l, err := lockfs.LockData(dir, logName(id), f, exclusive, 0)
	switch {
	case errors.Is(err, lockfs.ErrTimeout):
		return nil, ErrRunBusy
	case errors.Is(err, lockfs.ErrGone):
		return nil, nil // removed or replaced between the open and the lock
	case err != nil:
		return nil, fmt.Errorf("lock the log of run %s: %w", id, err)
	}
	return l, nil
}
