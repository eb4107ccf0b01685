package runstore

// Invariant 8: never read, write or move anything outside the state root
// because of what is inside it. os.Root keeps every access inside the
// root, but follows a link that stays inside it; runstore refuses links
// where its directories belong, inside or out.

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
)

// replaceWithLink replaces the layout directory rel with a symbolic link
// to target, and returns a fresh store (one that never opened rel before).
func replaceWithLink(t *testing.T, s *Store, rel, target string) *Store {
	t.Helper()
	if err := os.RemoveAll(s.osPath(rel)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, s.osPath(rel)); err != nil {
		t.Fatal(err)
	}
	fresh := New(s.Root())
	t.Cleanup(func() { fresh.Close() })
	return fresh
}

// assertRefusedLink checks that err is a refusal that names the directory
// and says it is a link.
func assertRefusedLink(t *testing.T, what string, err error, path string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded through a symbolic link at %s", what, path)
		return
	}
	if errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s = %v: a link is not a missing directory", what, err)
	}
	if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "symbolic link") {
		t.Errorf("%s error %q does not name %s and say it is a symbolic link", what, msg, path)
	}
}

// outsideActive is a directory outside the state root that looks like an
// active set: one valid, running record.
func outsideActive(t *testing.T) (string, record.RunID) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "active-elsewhere")
	mkdirAll(t, dir)
	id := idAt(time.Date(2024, 3, 4, 5, 6, 7, 0, time.UTC), 42)
	b, err := testRecord(id, record.Running).Encode()
	if err != nil {
		t.Fatal(err)
	}
	writeString(t, filepath.Join(dir, string(id)+".json"), string(b))
	return dir, id
}

func TestListActiveRefusesALinkedActiveDir(t *testing.T) {
	for name, inside := range map[string]bool{"out of the root": false, "inside the root": true} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			target, id := outsideActive(t)
			if inside {
				// A directory inside the state root: os.Root alone would
				// follow this link.
				mkdirAll(t, s.osPath("elsewhere"))
				b, _ := testRecord(id, record.Running).Encode()
				writeString(t, s.osPath("elsewhere", string(id)+".json"), string(b))
				target = "../elsewhere"
			}
			fresh := replaceWithLink(t, s, activeDir, target)
			ents, err := fresh.ListActive()
			assertRefusedLink(t, "ListActive", err, s.osPath(activeDir))
			for _, e := range ents {
				t.Errorf("ListActive listed %s through the link", e.Name)
			}
			if rec, err := fresh.ReadActive(id); err == nil {
				t.Errorf("ReadActive read %s through the link: %+v", id, rec)
			}
			if rec, err := fresh.ReadRun(id); err == nil {
				t.Errorf("ReadRun read %s through the link: %+v", id, rec)
			}
			if fresh.ActiveFileExists(string(id) + ".json") {
				t.Error("ActiveFileExists looked through the link")
			}
			// Ensure does not paper over it either.
			assertRefusedLink(t, "Ensure", fresh.Ensure(), s.osPath(activeDir))
		})
	}
}

func TestReserveRefusesLinkedDirs(t *testing.T) {
	for _, rel := range []string{ownersDir, activeDir} {
		t.Run(rel, func(t *testing.T) {
			s := newStore(t)
			elsewhere := filepath.Join(t.TempDir(), "elsewhere")
			mkdirAll(t, elsewhere)
			fresh := replaceWithLink(t, s, rel, elsewhere)
			// Ensure refuses the root as it is; so does everything after.
			if _, err := fresh.LockAdmission(context.Background(), time.Second); err == nil {
				t.Fatal("LockAdmission succeeded with a linked layout directory")
			} else {
				assertRefusedLink(t, "LockAdmission", err, s.osPath(rel))
			}
			a := &Admission{s: fresh} // as if the lock were held
			if locks, err := a.Reserve(testRecord(testID, record.Provisioning)); err == nil {
				locks.Release()
				t.Error("Reserve succeeded with a linked layout directory")
			}
			assertOnlyFiles(t, elsewhere)
			if rel == activeDir {
				// The reservation failed after its lock files were made: they
				// are gone again.
				assertOnlyFiles(t, s.osPath(ownersDir))
			}
		})
	}
}

// The owners directory is where liveness is proved. A link there must not
// make a run look dead (its locks unheld) or let a fence take a lock file
// somewhere else: liveness is Unknown, and fencing fails.
func TestOwnerStateFailsClosedOnALinkedOwnersDir(t *testing.T) {
	s := newStore(t)
	elsewhere := filepath.Join(t.TempDir(), "owners-elsewhere")
	mkdirAll(t, elsewhere)
	writeString(t, filepath.Join(elsewhere, ownerLockName(testID)), "")
	mustWriteActive(t, s, testRecord(testID, record.Running))
	fresh := replaceWithLink(t, s, ownersDir, elsewhere)

	o := fresh.OwnerState(testID, nil)
	if o.Owner != record.Unknown || o.Supervisor != record.Unknown || o.Err == nil {
		t.Errorf("OwnerState = %+v, want Unknown with the reason", o)
	}
	if !o.HoldsSlot(record.Running) {
		t.Error("a run whose liveness cannot be told does not hold its slot")
	}
	if l, err := fresh.Fence(testID, nil); err == nil {
		l.Release()
		t.Error("Fence succeeded through a linked owners directory")
	} else if errors.Is(err, ErrRunDone) || errors.Is(err, ErrRunBusy) {
		t.Errorf("Fence = %v, want an error about the directory", err)
	}
	assertOnlyFiles(t, elsewhere, ownerLockName(testID))
}

func TestFinishedRunsRefuseLinkedDirs(t *testing.T) {
	s := newStore(t)
	elsewhere := filepath.Join(t.TempDir(), "done-elsewhere")
	id := idAt(time.Date(2024, 3, 4, 5, 6, 7, 0, time.UTC), 1)
	mkdirAll(t, filepath.Join(elsewhere, id.Shard()))
	b, _ := testRecord(id, record.Succeeded).Encode()
	writeString(t, filepath.Join(elsewhere, id.Shard(), string(id)+".json"), string(b))

	// runs/done itself is a link.
	fresh := replaceWithLink(t, s, doneDir, elsewhere)
	var walked []record.RunID
	err := fresh.FinishIndex().WalkFinished(func(id record.RunID) bool { walked = append(walked, id); return true })
	assertRefusedLink(t, "WalkFinished", err, s.osPath(doneDir))
	if len(walked) != 0 || fresh.IsDone(id) {
		t.Errorf("finished runs listed through the link: %q, IsDone %v", walked, fresh.IsDone(id))
	}
	if rec, err := fresh.ReadDone(id); err == nil {
		t.Errorf("ReadDone read through the link: %+v", rec)
	}
	if err := fresh.RemoveFinished(id); err == nil {
		t.Error("RemoveFinished succeeded through the link")
	}
	assertExists(t, filepath.Join(elsewhere, id.Shard(), string(id)+".json"))

	// A shard is a link: its runs are never listed, read or removed, and a
	// run finishing into it does not write through it.
	if err := os.Remove(s.osPath(doneDir)); err != nil {
		t.Fatal(err)
	}
	mkdirAll(t, s.osPath(doneDir))
	if err := os.Symlink(filepath.Join(elsewhere, id.Shard()), s.osPath(doneDir, id.Shard())); err != nil {
		t.Fatal(err)
	}
	fresh = New(s.Root())
	defer fresh.Close()
	walked = nil
	err = fresh.FinishIndex().WalkFinished(func(id record.RunID) bool { walked = append(walked, id); return true })
	if len(walked) != 0 {
		t.Errorf("WalkFinished listed %q through a linked shard (err %v)", walked, err)
	}
	if fresh.IsDone(id) {
		t.Error("IsDone looked through a linked shard")
	}
	if rec, err := fresh.ReadRun(id); err == nil {
		t.Errorf("ReadRun read through a linked shard: %+v", rec)
	}
	if err := fresh.RemoveFinished(id); err == nil {
		// Nothing to remove is fine; removing through the link is not.
		assertExists(t, filepath.Join(elsewhere, id.Shard(), string(id)+".json"))
	}
	other := idAt(time.Date(2024, 3, 4, 5, 30, 0, 0, time.UTC), 2) // same shard
	if err := fresh.writeDone(testRecord(other, record.Failed)); err == nil {
		t.Error("writeDone into a linked shard succeeded")
	}
	assertOnlyFiles(t, filepath.Join(elsewhere, id.Shard()), string(id)+".json")
}

func TestQueueLogsAndLocksRefuseLinkedDirs(t *testing.T) {
	for _, rel := range []string{queueDir, logsDir, locksDir} {
		t.Run(rel, func(t *testing.T) {
			s := newStore(t)
			elsewhere := filepath.Join(t.TempDir(), "elsewhere")
			mkdirAll(t, elsewhere)
			fresh := replaceWithLink(t, s, rel, elsewhere)
			switch rel {
			case queueDir:
				writeString(t, filepath.Join(elsewhere, queue.TicketName(testID)), "{}")
				ents, err := fresh.Queue().ListTickets()
				assertRefusedLink(t, "ListTickets", err, s.osPath(queueDir))
				if len(ents) != 0 || fresh.Queue().HasTicket(testID) {
					t.Errorf("tickets seen through the link: %v", ents)
				}
				if fresh.Queue().WaiterState(testID) != record.Unknown {
					t.Errorf("WaiterState through a link = %v, want Unknown", fresh.Queue().WaiterState(testID))
				}
				fresh.Queue().Ring(testID)
				a := &Admission{s: fresh}
				if w, err := a.Enqueue(testTicket(testID, "t")); err == nil {
					w.Remove()
					t.Error("Enqueue succeeded through the link")
				}
				assertOnlyFiles(t, elsewhere, queue.TicketName(testID))
			case logsDir:
				if f, _, err := fresh.Logs().CreateLog(testID); err == nil {
					f.Close()
					t.Error("CreateLog succeeded through the link")
				}
				if f, err := fresh.Logs().OpenLog(testID); err == nil {
					f.Close()
					t.Error("OpenLog succeeded through the link")
				}
				assertOnlyFiles(t, elsewhere)
			case locksDir:
				_, err := fresh.LockAdmission(context.Background(), time.Second)
				assertRefusedLink(t, "LockAdmission", err, s.osPath(locksDir))
				assertOnlyFiles(t, elsewhere)
			}
		})
	}
}
