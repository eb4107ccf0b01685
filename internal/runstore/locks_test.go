package runstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/storetest"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
)

func reserve(t *testing.T, s *Store, id record.RunID) *RunLocks {
	t.Helper()
	a := lockAdmission(t, s)
	defer a.Release()
	l, err := a.Reserve(testRecord(id, record.Provisioning))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Release)
	return l
}

func owner(o, sup record.Liveness) record.Owner { return record.Owner{Owner: o, Supervisor: sup} }

func assertOwner(t *testing.T, s *Store, id record.RunID, want record.Owner) {
	t.Helper()
	got := s.OwnerState(id, nil)
	if got.Owner != want.Owner || got.Supervisor != want.Supervisor || got.Err != nil {
		t.Errorf("OwnerState(%s) = %+v, want %+v", id, got, want)
	}
}

// Reserve makes the lock files, held, and then the record, durably.
func TestReserve(t *testing.T) {
	s := newStore(t)
	assertOwner(t, s, testID, owner(record.Dead, record.Dead))
	l := reserve(t, s, testID)
	if l.ID() != testID || l.OwnerFile() == nil || l.SupervisorFile() == nil {
		t.Errorf("RunLocks = %+v", l)
	}
	rec, err := s.ReadActive(testID)
	want := testRecord(testID, record.Provisioning)
	want.Locks = lockIDsOf(t, s, testID)
	if err != nil || !reflect.DeepEqual(rec, want) {
		t.Errorf("reserved record = %+v, %v; want %+v", rec, err, want)
	}
	assertOnlyFiles(t, s.osPath(ownersDir), ownerLockName(testID), supervisorLockName(testID))
	assertMode(t, s.osPath(ownersDir, ownerLockName(testID)), FilePerm)
	assertOwner(t, s, testID, owner(record.Alive, record.Alive))

	// The same id again: taken (admission retries with another id), and the
	// first reservation is left alone.
	a := lockAdmission(t, s)
	if l2, err := a.Reserve(testRecord(testID, record.Provisioning)); !errors.Is(err, fs.ErrExist) {
		if l2 != nil {
			l2.Release()
		}
		t.Errorf("Reserve(same id) = %v, want ErrExist", err)
	}
	a.Release()
	assertOwner(t, s, testID, owner(record.Alive, record.Alive))
	assertExists(t, s.ActivePath(testID))
}

// A reservation that cannot be written leaves nothing behind: no lock
// files, no record.
func TestReserveFailureLeavesNothing(t *testing.T) {
	s := newStore(t)
	// A directory at the record's name makes the rename fail, and it
	// cannot be moved aside: quarantine/ is not a directory.
	mkdirAll(t, s.osPath(activeDir, recordName(testID), "x"))
	writeString(t, s.osPath(quarantineDir), "not a directory")
	a := lockAdmission(t, s)
	if l, err := a.Reserve(testRecord(testID, record.Provisioning)); err == nil {
		l.Release()
		t.Fatal("Reserve succeeded")
	} else if !strings.Contains(err.Error(), string(testID)) {
		t.Errorf("error %q does not name the run", err)
	}
	assertOnlyFiles(t, s.osPath(ownersDir))
	assertOnlyFiles(t, s.osPath(activeDir), recordName(testID))
}

// Fence proves nobody else works on a run: it fails while the run's
// supervisor or command holds a lock, and holds both once they are gone.
func TestFence(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	if f, err := s.Fence(testID, nil); !errors.Is(err, ErrRunBusy) {
		if f != nil {
			f.Release()
		}
		t.Fatalf("Fence of a living run = %v, want ErrRunBusy", err)
	}

	// The supervisor is gone, the command (holding the owner lock) lives.
	cmdHold := dupFile(t, l.OwnerFile())
	l.Release()
	assertOwner(t, s, testID, owner(record.Alive, record.Dead))
	if !s.OwnerState(testID, nil).Orphaned() {
		t.Error("Orphaned() = false for a run whose supervisor is gone and command lives")
	}
	if f, err := s.Fence(testID, nil); !errors.Is(err, ErrRunBusy) {
		if f != nil {
			f.Release()
		}
		t.Fatalf("Fence of an orphaned run = %v, want ErrRunBusy", err)
	}
	// Fencing failed half-way, and let go of what it took.
	assertOwner(t, s, testID, owner(record.Alive, record.Dead))

	// The command is gone too.
	cmdHold.Close()
	assertOwner(t, s, testID, owner(record.Dead, record.Dead))
	f, err := s.Fence(testID, nil)
	if err != nil {
		t.Fatalf("Fence of a dead run = %v", err)
	}
	assertOwner(t, s, testID, owner(record.Alive, record.Alive))
	// A second finalizer is fenced out.
	if f2, err := s.Fence(testID, nil); !errors.Is(err, ErrRunBusy) {
		if f2 != nil {
			f2.Release()
		}
		t.Fatalf("second Fence = %v, want ErrRunBusy", err)
	}

	final := testRecord(testID, record.Interrupted)
	final.Reason = "owner process 4711 exited without finalizing the run"
	if err := f.Finish(final); err != nil {
		t.Fatal(err)
	}
	assertMissing(t, s.ActivePath(testID))
	if rec, err := s.ReadDone(testID); err != nil || rec.State != record.Interrupted || rec.Reason != final.Reason {
		t.Errorf("finished record = %+v, %v", rec, err)
	}
	assertOnlyFiles(t, s.osPath(ownersDir))
	assertOwner(t, s, testID, owner(record.Dead, record.Dead))
	if f3, err := s.Fence(testID, nil); !errors.Is(err, ErrRunDone) {
		if f3 != nil {
			f3.Release()
		}
		t.Errorf("Fence of a finished run = %v, want ErrRunDone", err)
	}
}

// dupFile duplicates a lock descriptor, as a child inheriting it would.
func dupFile(t *testing.T, f *os.File) *os.File {
	t.Helper()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	d := os.NewFile(uintptr(fd), f.Name())
	t.Cleanup(func() { d.Close() })
	return d
}

// A run whose lock files were lost (a crash between creating the two, or
// someone removing them) is still fenced: a missing supervisor lock is
// no one's, and a missing owner lock of a run still active is made again,
// exclusively.
func TestFenceWithMissingLockFiles(t *testing.T) {
	s := newStore(t)
	mustWriteActive(t, s, testRecord(testID, record.Running))
	f, err := s.Fence(testID, nil)
	if err != nil {
		t.Fatalf("Fence with no lock files = %v", err)
	}
	assertOnlyFiles(t, s.osPath(ownersDir), ownerLockName(testID))
	assertOwner(t, s, testID, owner(record.Alive, record.Dead))
	if err := f.Finish(testRecord(testID, record.Interrupted)); err != nil {
		t.Fatal(err)
	}
	assertOnlyFiles(t, s.osPath(ownersDir))

	// No record and no lock files: the run is done.
	other := idAt(time.Now(), 1)
	if f, err := s.Fence(other, nil); !errors.Is(err, ErrRunDone) {
		if f != nil {
			f.Release()
		}
		t.Errorf("Fence(unknown run) = %v, want ErrRunDone", err)
	}
	assertOnlyFiles(t, s.osPath(ownersDir))
	// No owners directory at all.
	if f, err := New(t.TempDir()).Fence(other, nil); !errors.Is(err, ErrRunDone) {
		if f != nil {
			f.Release()
		}
		t.Errorf("Fence(no owners directory) = %v, want ErrRunDone", err)
	}
}

// Across processes: a run reserved by another process is alive until that
// process dies, and only then can it be fenced.
func TestOwnerStateAcrossProcesses(t *testing.T) {
	s := newStore(t)
	h := startHelper(t, "reserve", s.Root(), helperID+"="+string(testID))
	h.Expect("reserved")
	assertOwner(t, s, testID, owner(record.Alive, record.Alive))
	if f, err := s.Fence(testID, nil); !errors.Is(err, ErrRunBusy) {
		if f != nil {
			f.Release()
		}
		t.Fatalf("Fence of another process's run = %v, want ErrRunBusy", err)
	}
	h.Kill()
	assertOwner(t, s, testID, owner(record.Dead, record.Dead))
	f, err := s.Fence(testID, nil)
	if err != nil {
		t.Fatalf("Fence after the holder died = %v", err)
	}
	f.Release()

	// A process that finishes its run leaves nothing but the finished record.
	id := idAt(time.Now(), 2)
	h = startHelper(t, "reserve", s.Root(), helperID+"="+string(id))
	h.Expect("reserved")
	h.Send("finish")
	h.Expect("finished")
	assertOwner(t, s, id, owner(record.Dead, record.Dead))
	if !s.IsDone(id) || s.ActiveFileExists(recordName(id)) {
		t.Error("the helper's finished run is not (only) among the finished runs")
	}
	assertOnlyFiles(t, s.osPath(ownersDir), ownerLockName(testID), supervisorLockName(testID))
}

func TestFinishChecksTheRunAndWithdraw(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	other := idAt(time.Now(), 1)
	if err := l.Finish(testRecord(other, record.Succeeded)); err == nil || !strings.Contains(err.Error(), string(other)) {
		t.Errorf("Finish with another run's record = %v, want an error naming it", err)
	}
	// A final state is required.
	if err := l.Finish(testRecord(testID, record.Running)); err == nil {
		t.Error("Finish with an active state succeeded")
	}
	assertExists(t, s.ActivePath(testID))
	assertOwner(t, s, testID, owner(record.Alive, record.Alive))

	// Withdraw: the record left the active set some other way (quarantine).
	if _, err := s.QuarantineActive(recordName(testID), "test", time.Now(), "ci-7"); err != nil {
		t.Fatal(err)
	}
	if err := l.Withdraw(); err != nil {
		t.Fatal(err)
	}
	assertOnlyFiles(t, s.osPath(ownersDir))
	assertOwner(t, s, testID, owner(record.Dead, record.Dead))
}

// A stop request goes with the run it asked to stop.
func TestFinishRemovesTheStopRequest(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	if err := s.WriteStopRequest(testID, &record.StopRequest{PID: 1, User: "u", Signal: "SIGTERM"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Finish(testRecord(testID, record.Stopped)); err != nil {
		t.Fatal(err)
	}
	assertOnlyFiles(t, s.osPath(ownersDir))
	if r := s.ReadStopRequest(testID); r != nil {
		t.Errorf("stop request after Finish: %+v", r)
	}
}

// A detached supervisor adopts the descriptors it inherited; descriptors
// that are not the run's lock files are refused.
func TestAdoptRunLocks(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	ownerF, supF := dupFile(t, l.OwnerFile()), dupFile(t, l.SupervisorFile())
	l.Release()
	adopted, err := s.AdoptRunLocks(testID, ownerF, supF)
	if err != nil {
		t.Fatal(err)
	}
	assertOwner(t, s, testID, owner(record.Alive, record.Alive))
	if _, err := s.AdoptRunLocks(testID, supF, ownerF); err == nil {
		t.Error("AdoptRunLocks with the descriptors swapped succeeded")
	}
	if _, err := s.AdoptRunLocks(idAt(time.Now(), 1), ownerF, supF); err == nil {
		t.Error("AdoptRunLocks of another run succeeded")
	}
	if err := adopted.Finish(testRecord(testID, record.Succeeded)); err != nil {
		t.Fatal(err)
	}
	assertOnlyFiles(t, s.osPath(ownersDir))
}

// A lock file that cannot be probed (a link, a FIFO, a directory at its
// name) proves nothing: the run may be alive. OwnerState says Unknown with
// the reason, the run keeps its slot, the probe never blocks, and a
// leftover sweep leaves the file alone.
func TestOwnerStateFailsClosedOnUnprobeableLocks(t *testing.T) {
	outside := t.TempDir() + "/target.lock"
	writeString(t, outside, "")
	for name, plant := range map[string]func(path string){
		"link": func(path string) {
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
		},
		"FIFO":      func(path string) { mkfifo(t, path) },
		"directory": func(path string) { mkdirAll(t, path) },
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			mustWriteActive(t, s, testRecord(testID, record.Running))
			plant(s.osPath(ownersDir, ownerLockName(testID)))
			o, _ := returnsAtOnce(t, "OwnerState", func() (record.Owner, error) { return s.OwnerState(testID, nil), nil })
			if o.Owner != record.Unknown || o.Err == nil || !strings.Contains(o.Err.Error(), string(testID)) {
				t.Errorf("OwnerState = %+v, want Owner Unknown with a reason naming the run", o)
			}
			if !o.HoldsSlot(record.Running) {
				t.Error("HoldsSlot = false for a run whose owner cannot be probed")
			}
			if l, err := s.Fence(testID, nil); err == nil {
				l.Release()
				t.Error("Fence succeeded on a lock file that is not a regular file")
			}
			// Without its record, it is still not a leftover to remove.
			if err := os.Remove(s.ActivePath(testID)); err != nil {
				t.Fatal(err)
			}
			if ls := mustLeftovers(t, s); len(ls) != 0 {
				t.Errorf("Leftovers = %+v, want none", ls)
			}
			// The waiter of a ticket whose lock cannot be probed is alive too.
			plant(s.osPath(queueDir, queue.LockName(testID)))
			if w := s.queue.WaiterState(testID); w != record.Unknown {
				t.Errorf("WaiterState = %v, want Unknown", w)
			}
		})
	}
}

// lockIDsOf identifies the run's lock files as they are on disk now.
func lockIDsOf(t *testing.T, s *Store, id record.RunID) *record.LockIDs {
	t.Helper()
	o, err := os.Stat(s.osPath(ownersDir, ownerLockName(id)))
	if err != nil {
		t.Fatal(err)
	}
	sup, err := os.Stat(s.osPath(ownersDir, supervisorLockName(id)))
	if err != nil {
		t.Fatal(err)
	}
	return &record.LockIDs{Owner: fileID(o), Supervisor: fileID(sup)}
}

// A living run's owner lock file replaced (removed, then made again by
// someone else) must not make the run look dead: the record names the
// original file, and the kernel still holds it. Once the run's processes
// are gone, the original is free and the run is dead.
func TestOwnerStateSeesThroughAReplacedLockFile(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	rec, err := s.ReadActive(testID)
	if err != nil {
		t.Fatal(err)
	}
	path := s.osPath(ownersDir, ownerLockName(testID))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := s.OwnerState(testID, rec.Locks).Owner; got != record.Alive {
		t.Errorf("OwnerState with the lock file replaced = %v, want alive (the original is still held)", got)
	}
	if f, err := s.Fence(testID, rec.Locks); !errors.Is(err, ErrRunBusy) {
		if f != nil {
			f.Release()
		}
		t.Errorf("Fence with the lock file replaced = %v, want ErrRunBusy", err)
	}
	// Without the record's help, the replacement fools a probe: that is
	// what the record's lock ids are for.
	if got := s.OwnerState(testID, nil).Owner; got != record.Dead {
		t.Errorf("OwnerState without lock ids = %v; this test no longer shows the attack", got)
	}
	l.Release()
	if got := s.OwnerState(testID, rec.Locks).Owner; got != record.Dead {
		t.Errorf("OwnerState after the holders are gone = %v, want dead", got)
	}
	f, err := s.Fence(testID, rec.Locks)
	if err != nil {
		t.Fatalf("Fence after the holders are gone = %v, want the fence", err)
	}
	f.Release()
}

// A prober's shared lock, held for an instant (status, admission), is not
// a process the command left: retake waits it out. A lock that stays held
// is busy.
func TestRetakeWaitsOutAProbe(t *testing.T) {
	dir, r := openTestRoot(t)
	path := filepath.Join(dir, "owner.lock")
	writeString(t, path, "")
	probe, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(probe.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	// How long a probe holds it: the mechanism under test, not a wait.
	go func() { time.Sleep(2 * time.Millisecond); probe.Close() }()
	l, err := retake(r, "owner.lock")
	if err != nil {
		t.Fatalf("retake during a probe = %v; want the lock", err)
	}
	if l.File() == nil {
		t.Error("retake's lock has no descriptor to hand on")
	}
	_ = l.Release()
	leftover, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer leftover.Close()
	if err := unix.Flock(int(leftover.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if l, err := retake(r, "owner.lock"); !errors.Is(err, lockfs.ErrBusy) {
		if l != nil {
			_ = l.Release()
		}
		t.Fatalf("retake while another description keeps it = %v; want ErrBusy", err)
	}
}

func TestReleasedDirIsTheTestsOwn(t *testing.T) {
	if releasedDir != storetest.ReleasedDir {
		t.Fatalf("runstore passes released locks through %q, the tests skip %q", releasedDir, storetest.ReleasedDir)
	}
}
