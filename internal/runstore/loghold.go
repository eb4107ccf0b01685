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
	s  *Store
	id record.RunID
	f  *os.File
}

// HoldLog takes a shared lock on run id's log. fs.ErrNotExist: the run
// has no log (yet, or any more); ErrRunBusy: a prune is removing it.
func (s *Store) HoldLog(id record.RunID) (*LogHold, error) {
	f, err := s.OpenLog(id)
	if err != nil {
		return nil, err
	}
	if err := lockfs.LockFile(f, false, 0); err != nil {
		f.Close()
		if errors.Is(err, lockfs.ErrTimeout) {
			return nil, ErrRunBusy
		}
		return nil, fmt.Errorf("lock the log of run %s: %w", id, err)
	}
	h := &LogHold{s: s, id: id, f: f}
	if !h.Current() {
		h.Release() // removed or replaced between the open and the lock
		return nil, fmt.Errorf("lock the log of run %s: %w", id, fs.ErrNotExist)
	}
	return h, nil
}

// Current reports whether the held file is still the run's log: a log
// planted ahead of the run is moved aside when the run launches, and its
// waiter must hold the real one.
func (h *LogHold) Current() bool {
	dir, err := h.s.dir(logsDir)
	if err != nil {
		return false
	}
	defer dir.Close()
	same, err := atName(dir, logName(h.id), h.f)
	return err == nil && same
}

// Release lets the run be pruned again.
func (h *LogHold) Release() {
	if h != nil && h.f != nil {
		_ = h.f.Close()
		h.f = nil
	}
}

// lockLogToRemove takes the exclusive lock RemoveFinished needs on a
// run's log: ErrRunBusy if a waiter holds it. Without a log, or with
// something at its name that crew does not open (a waiter could not lock
// it either), there is nothing to hold: nil, nil. Close the file returned
// once the run is removed.
func (s *Store) lockLogToRemove(id record.RunID) (*os.File, error) {
	dir, err := s.dir(logsDir)
	if err != nil {
		return nil, nil
	}
	defer dir.Close()
	f, err := rootfs.Open(dir, logName(id), os.O_RDONLY, 0)
	if err != nil {
		return nil, nil
	}
	if err := lockfs.LockFile(f, true, 0); err != nil {
		f.Close()
		if errors.Is(err, lockfs.ErrTimeout) {
			return nil, ErrRunBusy
		}
		return nil, fmt.Errorf("lock the log of run %s: %w", id, err)
	}
	return f, nil
}
