package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/record"
)

// A run has two lock files in owners/: the owner lock, held by the
// supervisor and inherited by every process of the command (it is the
// slot), and the supervisor lock, held by the supervisor alone (it tells
// an orphaned command from a supervised one).
func ownerLockName(id record.RunID) string { return string(id) + ".lock" }

// releasedDir is the subdirectory of owners/ a finished run's lock files
// pass through on their way out (RunLocks.removeAndRelease). Its name
// starts with a dot: no listing of owners/ sees it.
const releasedDir = ".released"

func supervisorLockName(id record.RunID) string { return string(id) + ".supervisor.lock" }

var (
	// ErrRunBusy: a living process holds one of the run's locks.
	ErrRunBusy = errors.New("run is locked by a living process")
	// ErrRunDone: the run is no longer in the active set.
	ErrRunDone = errors.New("run is no longer active")
)

// RunLocks are a run's locks as held by this process: by its supervisor
// (from Reserve, or inherited with AdoptRunLocks), or by a finalizer that
// fenced a dead run (Fence).
type RunLocks struct {
	s     *Store
	id    record.RunID
	owner *lockfs.Lock
	sup   *lockfs.Lock // nil in a fence whose supervisor lock file was gone
	// own: the run's own locks (its supervisor's), never taken inside the
	// admission lock; only then may Finish compact the index afterwards.
	own bool
	// rf: the run's record file, open to be updated in place (made by
	// Reserve, or opened at the first update by a process that adopted
	// or fenced the run); nil until then, and for a run an older crew
	// reserved (a JSON record, rewritten as before).
	rf *runFile
}

// Reserve makes rec (a provisioning record with a fresh id) the
// reservation of a slot: it creates and locks the run's lock files, then
// writes the record durably. On failure it leaves nothing behind. An id
// that is taken already is an error satisfying errors.Is(err, fs.ErrExist):
// pick another id.
func (a *Admission) Reserve(rec *record.Run) (*RunLocks, error) {
	s := a.s
	dir, err := s.layout(ownersDir)
	if err != nil {
		return nil, fmt.Errorf("reserve run %s: %w", rec.RunID, err)
	}
	owner, err := s.createLock(dir, ownerLockName(rec.RunID))
	if err != nil {
		return nil, fmt.Errorf("reserve run %s in %s: %w", rec.RunID, s.display(ownersDir), unwrapPath(err))
	}
	sup, err := s.createLock(dir, supervisorLockName(rec.RunID))
	if err != nil {
		_ = owner.RemoveAndRelease()
		return nil, fmt.Errorf("reserve run %s in %s: %w", rec.RunID, s.display(ownersDir), unwrapPath(err))
	}
	failpoint.Hit(failpoint.OwnerLocked)
	ids, err := lockIDs(owner, sup)
	if err != nil {
		_ = sup.RemoveAndRelease()
		_ = owner.RemoveAndRelease()
		return nil, fmt.Errorf("reserve run %s: %w", rec.RunID, err)
	}
	rec.Locks = ids
	rf, err := s.reserveRecord(rec)
	if err != nil {
		// The write may have reached the directory before failing (on the
		// directory fsync); a reservation we could not make durable is
		// withdrawn before our locks go.
		if d, derr := s.layout(activeDir); derr == nil {
			_ = removeFile(d, recordName(rec.RunID))
		}
		_ = sup.RemoveAndRelease()
		_ = owner.RemoveAndRelease()
		return nil, err
	}
	s.appendIndex(rec)
	return &RunLocks{s: s, id: rec.RunID, owner: owner, sup: sup, own: true, rf: rf}, nil
}

// lockIDs identifies the files of a run's locks, for its record.
func lockIDs(owner, sup *lockfs.Lock) (*record.LockIDs, error) {
	ofi, err := owner.Stat()
	if err != nil {
		return nil, err
	}
	sfi, err := sup.Stat()
	if err != nil {
		return nil, err
	}
	return &record.LockIDs{Owner: fileID(ofi), Supervisor: fileID(sfi)}, nil
}

// Fence takes a run's locks to change a run this process does not own:
// its supervisor lock, then its owner lock. A living supervisor, a living
// command, or another finalizer holds at least one of them, so holding
// both proves nobody else works on the run. ErrRunBusy: someone does.
// ErrRunDone: the run left the active set. want, the lock files the run's
// record names (nil if unknown), guards against an owner lock file that
// was replaced under its holder: holding the replacement proves nothing,
// so the kernel is asked about the original.
func (s *Store) Fence(id record.RunID, want *record.LockIDs) (*RunLocks, error) {
	l := &RunLocks{s: s, id: id}
	dir, err := s.layout(ownersDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrRunDone
	}
	if err != nil {
		return nil, err
	}
	if failpoint.Skip(failpoint.Fence) {
		return l, nil // test builds only: prove the fence tests can fail
	}
	sup, err := lockfs.Take(dir, supervisorLockName(id))
	switch {
	case errors.Is(err, lockfs.ErrBusy):
		return nil, ErrRunBusy
	case errors.Is(err, lockfs.ErrGone):
		// Removed with its run, or never created (a crash between the two
		// lock files, before any record existed).
	case err != nil:
		return nil, fmt.Errorf("fence run %s: %w", id, err)
	default:
		l.sup = sup
	}
	owner, err := lockfs.Take(dir, ownerLockName(id))
	switch {
	case errors.Is(err, lockfs.ErrBusy):
		l.Release()
		return nil, ErrRunBusy
	case errors.Is(err, lockfs.ErrGone):
		// The owner lock file is removed only after the run left the active
		// set. If the record is still there, the file was lost; a fresh one,
		// created exclusively, is the fence for everyone else.
		if !s.hasActiveFile(id) {
			l.Release()
			return nil, ErrRunDone
		}
		owner, err = s.publishLock(dir, ownerLockName(id))
		if err != nil {
			l.Release()
			if errors.Is(err, fs.ErrExist) {
				return nil, ErrRunBusy
			}
			return nil, fmt.Errorf("fence run %s: %w", id, err)
		}
	case err != nil:
		l.Release()
		return nil, fmt.Errorf("fence run %s: %w", id, err)
	}
	l.owner = owner
	if want != nil {
		fi, err := owner.Stat()
		if err == nil && fileID(fi) != want.Owner {
			switch held, kerr := heldInKernel(want.Owner); {
			case kerr != nil:
				l.Release()
				return nil, &UnprovableError{ID: id, Err: kerr}
			case held:
				l.Release()
				return nil, ErrRunBusy
			}
		}
	}
	return l, nil
}

// UnprovableError is a run whose owner lock file was replaced, on a
// system that cannot tell whether the original is still held.
type UnprovableError struct {
	ID  record.RunID
	Err error
}

func (e *UnprovableError) Error() string {
	return fmt.Sprintf("run %s: its owner lock file was replaced while the run was active, and crew cannot prove whether the run still lives (%v); if you are sure it is gone, remove its record from runs/active", e.ID, e.Err)
}
func (e *UnprovableError) Unwrap() error { return e.Err }

func heldInKernel(id record.FileID) (bool, error) { return lockfs.HeldInKernel(id.Dev, id.Ino) }

func (s *Store) hasActiveFile(id record.RunID) bool {
	dir, err := s.layout(activeDir)
	if err != nil {
		return false
	}
	_, err = findRecord(dir, id)
	return err == nil
}

// AdoptRunLocks wraps the run's lock descriptors this process inherited (a
// detached supervisor). They are held already: a flock belongs to the open
// file description, which the parent shared with us.
func (s *Store) AdoptRunLocks(id record.RunID, owner, sup *os.File) (*RunLocks, error) {
	dir, err := s.layout(ownersDir)
	if err != nil {
		return nil, err
	}
	o, err := lockfs.Adopt(owner, dir, ownerLockName(id))
	if err != nil {
		return nil, err
	}
	sl, err := lockfs.Adopt(sup, dir, supervisorLockName(id))
	if err != nil {
		return nil, err
	}
	return &RunLocks{s: s, id: id, owner: o, sup: sl, own: true}, nil
}

// ID is the run these locks belong to.
func (l *RunLocks) ID() record.RunID { return l.id }

// OwnerFile is the owner lock's descriptor, for the command to inherit:
// the slot then stays held while any process of the run lives.
func (l *RunLocks) OwnerFile() *os.File { return l.owner.File() }

// SupervisorFile is the supervisor lock's descriptor, for a detached
// supervisor to inherit (never the command).
func (l *RunLocks) SupervisorFile() *os.File {
	if l.sup == nil {
		return nil
	}
	return l.sup.File()
}

// OthersHold reports whether processes other than this one still
// hold the run's owner lock: the ones the command left running when it
// ended (they inherited the lock as fd 3). A lock belongs to an open file
// description, which this process shares with them, so only another
// description can tell: this process lets go of its own descriptor and
// takes the lock again on a fresh one (its own, which a next attempt can
// inherit). If someone else holds it, this process no longer does, and
// only its supervisor lock keeps finalizers away until it lets go
// (LeaveToOthers). Where it cannot tell, it says the lock is held: a
// run is never finalized while its slot may still be in use.
func (l *RunLocks) OthersHold() (bool, error) {
	dir, err := l.s.layout(ownersDir)
	if err != nil {
		return true, fmt.Errorf("run %s: %w", l.id, err)
	}
	if l.owner != nil {
		_ = l.owner.Release()
		l.owner = nil
	}
	o, err := retake(dir, ownerLockName(l.id))
	switch {
	case errors.Is(err, lockfs.ErrBusy):
		return true, nil
	case err != nil:
		return true, fmt.Errorf("run %s: take its owner lock again: %w", l.id, err)
	}
	l.owner = o
	return false, nil
}

// retake takes lock name again (lockfs.TakeOwn), waiting out a prober:
// status and admission hold a shared lock for microseconds, and only a
// lock that stays held means processes of the run. ErrBusy: it stayed.
func retake(dir *os.Root, name string) (*lockfs.Lock, error) {
	for attempt := 0; ; attempt++ {
		o, err := lockfs.TakeOwn(dir, name)
		if !errors.Is(err, lockfs.ErrBusy) || attempt == probeRetries {
			return o, err
		}
		time.Sleep(probeRetryDelay)
	}
}

// probeRetries and probeRetryDelay bound how long OwnerHeldByOthers waits
// out a prober's shared lock: 10 ms in all, far longer than a probe holds
// it, far shorter than anything a process of the run does.
const (
	probeRetries    = 100
	probeRetryDelay = 100 * time.Microsecond
)

// LeaveToOthers hands the slot of a run whose command has ended to the
// processes the command left, which hold its owner lock
// (OthersHold): rec, still running and saying how the command
// ended (record.CommandEnd), is made durable, and the supervisor lock is
// released, so that the run is finalized (with that end) by whoever finds
// its owner lock free once they are gone.
func (l *RunLocks) LeaveToOthers(rec *record.Run) error {
	if rec.RunID != l.id || rec.State != record.Running || rec.CommandEnded == nil {
		return fmt.Errorf("run %s: not a running record whose command has ended", rec.RunID)
	}
	if err := l.write(rec, true); err != nil {
		return err
	}
	l.Release()
	return nil
}

// Release drops this process's hold on the locks; processes that
// inherited them keep them.
func (l *RunLocks) Release() {
	if l.owner != nil {
		_ = l.owner.Release()
	}
	if l.sup != nil {
		_ = l.sup.Release()
	}
	l.owner, l.sup = nil, nil
	l.rf.close()
	l.rf = nil
}

// Finish records the run's final state and lets go: the final record is
// made durable among the finished runs, the run leaves the active set, its
// stop request goes, and only then its lock files are removed and released,
// the owner lock last.
func (l *RunLocks) Finish(rec *record.Run) error {
	if rec.RunID != l.id {
		return fmt.Errorf("finish run %s with the locks of run %s", rec.RunID, l.id)
	}
	if err := l.finish(rec); err != nil {
		return err
	}
	return l.released(l.removeAndRelease())
}

// released follows a run's final release: the run's own supervisor,
// holding nothing now, compacts the index of finished runs if its append
// asked for that.
func (l *RunLocks) released(err error) error {
	if l.own {
		l.s.compactIfDue()
	}
	return err
}

// Withdraw removes the run's lock files and releases them, for a run whose
// record has already left the active set (quarantined).
func (l *RunLocks) Withdraw() error { return l.removeAndRelease() }

func (l *RunLocks) removeAndRelease() error {
	dir, err := l.s.layout(ownersDir)
	if err != nil {
		l.Release()
		return err
	}
	// Waiters watch owners/ for lock files closed in place (a death):
	// the run's own locks leave through releasedDir, so that a normal end
	// wakes none of them (issue 25: every finish woke every waiter).
	// If it cannot be made, they are removed in place (and wake them).
	_ = l.s.mkdir(dir, releasedDir)
	var errs []error
	if l.sup != nil {
		errs = append(errs, l.sup.RemoveUnseenAndRelease(releasedDir))
	} else {
		errs = append(errs, removeFile(dir, supervisorLockName(l.id)))
	}
	if l.owner != nil {
		errs = append(errs, l.owner.RemoveUnseenAndRelease(releasedDir))
	} else {
		errs = append(errs, removeFile(dir, ownerLockName(l.id)))
	}
	l.owner, l.sup = nil, nil
	l.rf.close()
	l.rf = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("run %s: %w", l.id, err)
	}
	return nil
}

// OwnerState is the one answer to "does anyone still work on this run?":
// whether a living process holds its owner lock, and its supervisor lock.
// A probe that fails is Unknown, never Dead. want, the lock files named in
// the run's record (nil for an unreadable or older record), makes the
// answer immune to a lock file replaced under a living holder: if the
// file at the name is not the one locked at reservation, the kernel is
// asked about the original (Unknown where it cannot say).
func (s *Store) OwnerState(id record.RunID, want *record.LockIDs) record.Owner {
	dir, err := s.layout(ownersDir)
	if errors.Is(err, fs.ErrNotExist) {
		return record.Owner{Owner: record.Dead, Supervisor: record.Dead}
	}
	if err != nil {
		return record.Owner{Owner: record.Unknown, Supervisor: record.Unknown, Err: err}
	}
	return ownerState(dir, id, want)
}

// ownerState probes a run's two locks in the owners directory dir.
func ownerState(dir *os.Root, id record.RunID, want *record.LockIDs) record.Owner {
	var o record.Owner
	var wantOwner, wantSup *record.FileID
	if want != nil {
		wantOwner, wantSup = &want.Owner, &want.Supervisor
	}
	var err error
	o.Owner, err = probeAs(dir, ownerLockName(id), wantOwner)
	var serr error
	o.Supervisor, serr = probeAs(dir, supervisorLockName(id), wantSup)
	if err = errors.Join(err, serr); err != nil {
		o.Err = fmt.Errorf("run %s: %w", id, err)
	}
	return o
}

// probeAs probes the lock at name, which should be the file want (nil: any
// file). A missing file or a different one means the original may still be
// held under no name, or another: only the kernel can say.
func probeAs(dir *os.Root, name string, want *record.FileID) (record.Liveness, error) {
	held, fi, err := lockfs.ProbeFile(dir, name)
	switch {
	case err != nil:
		return record.Unknown, err
	case want != nil && (fi == nil || fileID(fi) != *want):
		kheld, kerr := heldInKernel(*want)
		switch {
		case kerr != nil:
			return record.Unknown, fmt.Errorf("lock file %s was replaced or removed: %w", name, kerr)
		case kheld:
			return record.Alive, nil
		}
		return record.Dead, nil
	case held:
		return record.Alive, nil
	}
	return record.Dead, nil
}

func probe(dir *os.Root, name string) (record.Liveness, error) {
	held, err := lockfs.Probe(dir, name)
	switch {
	case err != nil:
		return record.Unknown, err
	case held:
		return record.Alive, nil
	}
	return record.Dead, nil
}

// publishLock makes a new lock file appear at name already locked by this
// process (lockfs.CreateTemp, Publish), with the state root's file mode;
// fs.ErrExist if name exists. For a lock this process keeps to itself.
func (s *Store) publishLock(dir *os.Root, name string) (*lockfs.Lock, error) {
	l, err := lockfs.CreateTemp(dir, name, s.filePerm())
	if err != nil {
		return nil, err
	}
	if err := l.Publish(name); err != nil {
		_ = l.RemoveAndRelease()
		return nil, err
	}
	return l, nil
}

// createLock creates and locks a new lock file on a descriptor a child
// process can inherit (a run's owner and supervisor locks), with the state
// root's file mode: in a root shared with a group, every member must be
// able to probe (read) and fence (write) it.
func (s *Store) createLock(dir *os.Root, name string) (*lockfs.Lock, error) {
	l, err := lockfs.Create(dir, name)
	if err != nil {
		return nil, err
	}
	if perm := s.filePerm(); perm != FilePerm {
		if err := l.File().Chmod(perm); err != nil {
			_ = l.RemoveAndRelease()
			return nil, fmt.Errorf("set the mode of lock %s: %w", name, err)
		}
	}
	return l, nil
}

// Update writes rec (still active) over the run's record.
func (l *RunLocks) Update(rec *record.Run) error { return l.write(rec, false) }

// ReadStopRequest is crew stop's request for the run, if any.
func (l *RunLocks) ReadStopRequest() *record.StopRequest { return l.s.ReadStopRequest(l.id) }

// WatchStops watches owners/ for the run's stop requests.
func (l *RunLocks) WatchStops() (backend.StopWatch, error) {
	w, err := l.s.WatchStopRequests(l.id)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Holders are the processes other than this one the kernel shows holding
// the run's owner lock.
func (l *RunLocks) Holders() ([]int, error) { return l.s.OwnerLockHolders(l.id) }

// Claim is the owner lock, which the command inherits as fd 3.
func (l *RunLocks) Claim() backend.Claim { return claim{l} }

type claim struct{ l *RunLocks }

func (c claim) Files() []*os.File { return []*os.File{c.l.OwnerFile()} }
func (c claim) Env() string       { return "CREW_ROOT=" + c.l.s.Root() }

// Lease is nil: the owner lock holds the slot for as long as any process
// keeps it, and cannot run out.
func (c claim) Lease() backend.Lease { return nil }

// HandOver is the state root and both locks, for a detached supervisor
// (AdoptRunLocks takes them back).
func (l *RunLocks) HandOver() backend.HandOver {
	return backend.HandOver{Store: []string{"--root", l.s.Root()}, Files: []*os.File{l.OwnerFile(), l.SupervisorFile()}}
}
