package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"github.com/crew-dev/crew/internal/proc"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
)

// What crew stop and the supervisor need to find a run's processes and to
// pass stop requests between them.

// RunLockIDs are the kernel's names for a run's lock files, by which its
// processes are found (internal/proc): a process belongs to the run while
// it holds the owner lock. Sup is zero if the supervisor lock file is
// gone. A lock file with more than one link is refused: crew creates them
// exclusively and never links them, so another link would let a process
// holding some outside file pass for the run's.
func (s procs) RunLockIDs(id record.RunID) (owner, sup proc.FileID, err error) {
	dir, err := s.layout(ownersDir)
	if err != nil {
		return owner, sup, fmt.Errorf("find the lock files of run %s: %w", id, err)
	}
	if owner, err = lockFileID(dir, ownerLockName(id)); err != nil {
		return owner, sup, fmt.Errorf("run %s: %w", id, err)
	}
	sup, err = lockFileID(dir, supervisorLockName(id))
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err != nil {
		return owner, sup, fmt.Errorf("run %s: %w", id, err)
	}
	return owner, sup, nil
}

// OwnerLockHolders lists the processes other than this one that the
// kernel shows holding run id's owner lock, in order; proc.ErrUnsupported
// where the system cannot tell.
func (s procs) OwnerLockHolders(id record.RunID) ([]int, error) {
	owner, _, err := s.RunLockIDs(id)
	if err != nil {
		return nil, err
	}
	scan, err := proc.FindHolders(owner)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, h := range scan.Of(owner) {
		if h.PID != os.Getpid() {
			pids = append(pids, h.PID)
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

func lockFileID(dir *os.Root, name string) (proc.FileID, error) {
	fi, err := dir.Lstat(name)
	if err != nil {
		return proc.FileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return proc.FileID{}, &rootfs.NotRegularError{Name: name, Mode: fi.Mode()}
	case !ok:
		return proc.FileID{}, fmt.Errorf("lock file %s: no inode to identify it by", name)
	case st.Nlink != 1:
		return proc.FileID{}, fmt.Errorf("lock file %s has %d links (crew never links it): refusing to identify processes by it", name, st.Nlink)
	}
	return proc.FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, nil
}

// StopWatch is how a supervisor notices a stop request for its run
// cheaply: it keeps owners/ open, and each Pending costs one fstatat until
// a new request file appears. After Notify (Linux), Changed wakes it when
// one may have (inotify), so it need not poll often.
type StopWatch struct {
	s      *Store
	id     record.RunID
	dir    *os.Root
	seen   os.FileInfo // the request file last read, to read each one once
	notify *notifier   // nil: poll
}

// WatchStopRequests starts watching for stop requests for run id.
func (s stops) WatchStopRequests(id record.RunID) (*StopWatch, error) {
	dir, err := s.dir(ownersDir)
	if err != nil {
		return nil, fmt.Errorf("watch for stop requests of run %s: %w", id, err)
	}
	return &StopWatch{s: s.Store, id: id, dir: dir}, nil
}

// Notify asks the kernel to wake the watch (Changed) when a stop request
// may have appeared, and reports whether it will. It is separate from
// WatchStopRequests because an inotify instance is dear to give back:
// closing one waits for the kernel's fsnotify SRCU grace period, 0-24 ms
// (median 12 ms) on a 2-core VM, which tripled the wall time of a short
// run when every run watched from its start. A supervisor polls first and
// asks for this only once its command has run a while.
func (w *StopWatch) Notify() bool {
	if w == nil {
		return false
	}
	if w.notify == nil {
		w.notify = newNotifier(w.dir)
	}
	return w.notify != nil
}

// Changed delivers a value when a stop request may have appeared; nil
// (never) where the kernel cannot say, and Notified is false.
func (w *StopWatch) Changed() <-chan struct{} {
	if w == nil || w.notify == nil {
		return nil
	}
	return w.notify.changed
}

// Pending returns a stop request not yet acknowledged, if a new one has
// appeared since the last call.
func (w *StopWatch) Pending() *record.StopRequest {
	fi, err := w.dir.Lstat(stopRequestName(w.id))
	if err != nil || (w.seen != nil && os.SameFile(fi, w.seen)) {
		return nil
	}
	req, read, err := readStopRequest(w.dir, w.id)
	if read == nil {
		return nil
	}
	w.seen = read // the file read, whatever the name held at the Lstat
	if err != nil || req.Ack != nil {
		return nil
	}
	return req
}

// Acknowledge tells crew stop that the supervisor has acted on req: it
// rewrites the request with ack, durably, so that who asked survives a
// crash too.
func (w *StopWatch) Acknowledge(req *record.StopRequest, ack record.StopAck) error {
	acked := *req
	acked.RunID, acked.Ack = w.id, &ack
	b, err := acked.Encode()
	if err == nil {
		err = writeFileMode(w.dir, stopRequestName(w.id), b, durable, w.s.filePerm())
	}
	if err != nil {
		return fmt.Errorf("acknowledge the stop request of run %s: %w", w.id, unwrapPath(err))
	}
	// The next Pending reads our own write once, sees the ack, and from
	// then on costs one fstatat again.
	return nil
}

// Close stops watching.
func (w *StopWatch) Close() {
	if w.notify != nil {
		w.notify.close()
	}
	_ = w.dir.Close()
}
