package runstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
)

// leftoverKey is how a test names a leftover: kind and path.
func leftoverKey(l Leftover) string { return fmt.Sprintf("%d %s", l.Kind, l.Path) }

func listLeftovers(t *testing.T, s *Store) map[string]Leftover {
	t.Helper()
	ls, err := returnsAtOnce(t, "Leftovers", func() ([]Leftover, error) { return s.Leftovers() })
	if err != nil {
		t.Fatalf("Leftovers = %v", err)
	}
	m := map[string]Leftover{}
	for _, l := range ls {
		k := leftoverKey(l)
		if _, dup := m[k]; dup {
			t.Errorf("leftover %s listed twice", k)
		}
		m[k] = l
	}
	return m
}

func sortedKeys(m map[string]Leftover) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func key(kind LeftoverKind, path string) string { return fmt.Sprintf("%d %s", kind, path) }

func TestLeftoversNoRoot(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "none"))
	ls, err := s.Leftovers()
	if err != nil || ls != nil {
		t.Fatalf("Leftovers(no root) = %v, %v", ls, err)
	}
	assertMissing(t, s.Root())
}

// Each kind of leftover is listed with its run, and only what is truly left
// over: files that belong to a run still in the active set, a living
// waiter, a file being written, or a foreign name are not.
func TestLeftoversListsEachKind(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC)
	id := func(n int) record.RunID { return idAt(base.Add(time.Duration(n)*time.Second), n) }

	// LeftoverLock: lock files of a run with no active record, nobody holding them.
	deadLocks := id(1)
	writeString(t, s.osPath(ownersDir, ownerLockName(deadLocks)), "")
	writeString(t, s.osPath(ownersDir, supervisorLockName(deadLocks)), "")
	// Not: lock files of a run in the active set (recovery's business).
	activeRun := id(2)
	mustWriteActive(t, s, testRecord(activeRun, record.Running))
	writeString(t, s.osPath(ownersDir, ownerLockName(activeRun)), "")
	// Not: lock files someone holds (a supervisor finishing up).
	heldLocks := id(3)
	writeString(t, s.osPath(ownersDir, supervisorLockName(heldLocks)), "")
	holdLock(t, s, ownersDir, supervisorLockName(heldLocks))
	// Not: foreign names.
	writeString(t, s.osPath(ownersDir, "notes.lock"), "")
	writeString(t, s.osPath(ownersDir, "r-bad.lock"), "")

	// LeftoverTicket: a ticket whose waiter is gone (its lock free), with
	// its lock and bell.
	deadTicket := id(4)
	b, _ := testTicket(deadTicket, "deploy:prod").Encode()
	writeString(t, s.osPath(queueDir, queue.TicketName(deadTicket)), string(b))
	writeString(t, s.osPath(queueDir, queue.LockName(deadTicket)), "")
	mkfifo(t, s.osPath(queueDir, queue.BellName(deadTicket)))
	// A ticket with no lock file at all: its waiter is gone too.
	lockless := id(5)
	b, _ = testTicket(lockless, "t").Encode()
	writeString(t, s.osPath(queueDir, queue.TicketName(lockless)), string(b))
	// An unreadable ticket of a dead waiter is still a leftover.
	corruptTicket := id(6)
	writeString(t, s.osPath(queueDir, queue.TicketName(corruptTicket)), "{")
	// Not: a living waiter's ticket.
	a := lockAdmission(t, s)
	liveTicket := id(7)
	w, err := a.Enqueue(testTicket(liveTicket, "waiting"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Remove()
	a.Release()

	// LeftoverQueueLock: a waiter's lock (and bell) with no ticket.
	queueLock := id(8)
	writeString(t, s.osPath(queueDir, queue.LockName(queueLock)), "")
	mkfifo(t, s.osPath(queueDir, queue.BellName(queueLock)))
	// Not: one that is held (a waiter joining the queue).
	heldQueueLock := id(9)
	writeString(t, s.osPath(queueDir, queue.LockName(heldQueueLock)), "")
	holdLock(t, s, queueDir, queue.LockName(heldQueueLock))

	// LeftoverLog: a log whose run has no record anywhere.
	orphanLog := id(10)
	writeString(t, s.Logs().LogPath(orphanLog), "output")
	// Not: logs of an active run, a finished run, a waiting ticket.
	writeString(t, s.Logs().LogPath(activeRun), "")
	finished := id(11)
	mustWriteDone(t, s, testRecord(finished, record.Succeeded))
	writeString(t, s.Logs().LogPath(finished), "")
	writeString(t, s.Logs().LogPath(liveTicket), "")
	writeString(t, s.osPath(logsDir, "notes.log"), "")

	// LeftoverStop: a stop request of a finished run (or of none at all).
	stopFinished := id(16)
	writeString(t, s.osPath(ownersDir, stopRequestName(finished)), "{}")
	writeString(t, s.osPath(ownersDir, stopRequestName(stopFinished)), "{}")
	// Not: stop requests of an active run and of a waiting start.
	writeString(t, s.osPath(ownersDir, stopRequestName(activeRun)), "{}")
	writeString(t, s.osPath(ownersDir, stopRequestName(liveTicket)), "{}")
	writeString(t, s.osPath(ownersDir, "notes.stop"), "")

	// LeftoverTemp: temporary files of interrupted writes, wherever crew
	// writes; with the run id when the name has one.
	temps := map[string]record.RunID{
		s.osPath(".crew.json0123456789abcdef"):                                  "",
		s.osPath(activeDir, "."+recordName(id(12))+"0123456789abcdef"):          id(12),
		s.osPath(queueDir, "."+queue.TicketName(id(13))+"0123456789abcdef"):     id(13),
		s.osPath(ownersDir, "."+stopRequestName(id(14))+"0123456789abcdef"):     id(14),
		s.osPath(shardDir(finished), "."+recordName(finished)+"0123456789abcd"): finished,
	}
	mkdirAll(t, s.osPath(quarantineDir))
	temps[s.osPath(quarantineDir, ".x.why0123")] = ""
	for path := range temps {
		writeString(t, path, "torn")
	}
	// Not: a temporary file of a run whose owner lock is held (being
	// written right now), a dot-directory, the admission lock's directory.
	writing := id(15)
	writeString(t, s.osPath(activeDir, "."+recordName(writing)+"0123456789abcdef"), "half")
	writeString(t, s.osPath(ownersDir, ownerLockName(writing)), "")
	holdLock(t, s, ownersDir, ownerLockName(writing))
	mkdirAll(t, s.osPath(activeDir, ".dotdir"))

	got := listLeftovers(t, s)
	want := map[string]Leftover{
		key(LeftoverLock, s.osPath(ownersDir, ownerLockName(deadLocks))):         {Kind: LeftoverLock, ID: deadLocks},
		key(LeftoverLock, s.osPath(ownersDir, supervisorLockName(deadLocks))):    {Kind: LeftoverLock, ID: deadLocks},
		key(LeftoverTicket, s.osPath(queueDir, queue.TicketName(deadTicket))):    {Kind: LeftoverTicket, ID: deadTicket, Task: "deploy:prod"},
		key(LeftoverTicket, s.osPath(queueDir, queue.TicketName(lockless))):      {Kind: LeftoverTicket, ID: lockless, Task: "t"},
		key(LeftoverTicket, s.osPath(queueDir, queue.TicketName(corruptTicket))): {Kind: LeftoverTicket, ID: corruptTicket},
		key(LeftoverQueueLock, s.osPath(queueDir, queue.LockName(queueLock))):    {Kind: LeftoverQueueLock, ID: queueLock},
		key(LeftoverLog, s.Logs().LogPath(orphanLog)):                            {Kind: LeftoverLog, ID: orphanLog},
		key(LeftoverStop, s.osPath(ownersDir, stopRequestName(finished))):        {Kind: LeftoverStop, ID: finished},
		key(LeftoverStop, s.osPath(ownersDir, stopRequestName(stopFinished))):    {Kind: LeftoverStop, ID: stopFinished},
	}
	for path, id := range temps {
		want[key(LeftoverTemp, path)] = Leftover{Kind: LeftoverTemp, ID: id}
	}
	if gk, wk := sortedKeys(got), sortedKeys(want); !slices.Equal(gk, wk) {
		t.Errorf("Leftovers =\n  %s\nwant\n  %s", strings.Join(gk, "\n  "), strings.Join(wk, "\n  "))
	}
	for k, w := range want {
		g, ok := got[k]
		if ok && (g.ID != w.ID || g.Task != w.Task) {
			t.Errorf("leftover %s has ID %q task %q, want %q, %q", k, g.ID, g.Task, w.ID, w.Task)
		}
	}
	// Listing took nothing and removed nothing.
	for k := range want {
		assertExists(t, got[k].Path)
	}
	if o := s.OwnerState(deadLocks, nil); o.Owner != record.Dead {
		t.Errorf("after Leftovers the dead run's lock is %v", o.Owner)
	}
}

// RemoveLeftover removes each kind (with the files that go with it), and
// reports it did.
func TestRemoveLeftoverEachKind(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC)
	lockRun, ticket, queueLock, logRun, tempRun, stopRun := idAt(base, 1), idAt(base, 2), idAt(base, 3), idAt(base, 4), idAt(base, 5), idAt(base, 6)
	writeString(t, s.osPath(ownersDir, stopRequestName(stopRun)), "{}")
	writeString(t, s.osPath(ownersDir, ownerLockName(lockRun)), "")
	writeString(t, s.osPath(ownersDir, supervisorLockName(lockRun)), "")
	b, _ := testTicket(ticket, "t").Encode()
	writeString(t, s.osPath(queueDir, queue.TicketName(ticket)), string(b))
	writeString(t, s.osPath(queueDir, queue.LockName(ticket)), "")
	mkfifo(t, s.osPath(queueDir, queue.BellName(ticket)))
	writeString(t, s.osPath(queueDir, queue.LockName(queueLock)), "")
	mkfifo(t, s.osPath(queueDir, queue.BellName(queueLock)))
	writeString(t, s.Logs().LogPath(logRun), "")
	writeString(t, s.osPath(activeDir, "."+recordName(tempRun)+"0123456789abcdef"), "")
	writeString(t, s.osPath(".crew.json0123"), "")

	kinds := map[LeftoverKind]int{}
	a := lockAdmission(t, s)
	for _, l := range mustLeftovers(t, s) {
		removed, err := a.RemoveLeftover(l)
		if err != nil || !removed {
			t.Errorf("RemoveLeftover(%s) = %v, %v; want removed", leftoverKey(l), removed, err)
		}
		kinds[l.Kind]++
		assertMissing(t, l.Path)
	}
	wantKinds := map[LeftoverKind]int{LeftoverLock: 2, LeftoverTicket: 1, LeftoverQueueLock: 1, LeftoverLog: 1, LeftoverTemp: 2, LeftoverStop: 1}
	for k, n := range wantKinds {
		if kinds[k] != n {
			t.Errorf("removed %d leftovers of kind %d, want %d", kinds[k], k, n)
		}
	}
	// A ticket goes with its lock and bell; a queue lock with its bell.
	assertOnlyFiles(t, s.osPath(queueDir))
	assertOnlyFiles(t, s.osPath(ownersDir))
	assertOnlyFiles(t, s.osPath(logsDir))
	assertOnlyFiles(t, s.osPath(activeDir))
	if ls := mustLeftovers(t, s); len(ls) != 0 {
		t.Errorf("leftovers after removing them all: %v", ls)
	}
}

func mustLeftovers(t *testing.T, s *Store) []Leftover {
	t.Helper()
	ls, err := s.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// Leftovers is a snapshot taken without locks; RemoveLeftover decides for
// good. A file that stopped being a leftover between the two (its lock
// taken, its run's record written, its ticket back) is left alone.
func TestRemoveLeftoverRechecks(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC)
	find := func(kind LeftoverKind, path string) Leftover {
		t.Helper()
		for _, l := range mustLeftovers(t, s) {
			if l.Kind == kind && l.Path == path {
				return l
			}
		}
		t.Fatalf("no leftover %d %s", kind, path)
		return Leftover{}
	}
	a := lockAdmission(t, s)
	expectKept := func(l Leftover) {
		t.Helper()
		removed, err := a.RemoveLeftover(l)
		if removed || err != nil {
			t.Errorf("RemoveLeftover(%s) = %v, %v; want it kept", leftoverKey(l), removed, err)
		}
		assertExists(t, l.Path)
	}

	t.Run("lock taken meanwhile", func(t *testing.T) {
		id := idAt(base, 1)
		writeString(t, s.osPath(ownersDir, ownerLockName(id)), "")
		l := find(LeftoverLock, s.osPath(ownersDir, ownerLockName(id)))
		release := holdLock(t, s, ownersDir, ownerLockName(id))
		expectKept(l)
		release()
	})
	t.Run("record written meanwhile", func(t *testing.T) {
		id := idAt(base, 2)
		writeString(t, s.osPath(ownersDir, ownerLockName(id)), "")
		l := find(LeftoverLock, s.osPath(ownersDir, ownerLockName(id)))
		mustWriteActive(t, s, testRecord(id, record.Provisioning))
		expectKept(l)
	})
	t.Run("waiter came back", func(t *testing.T) {
		id := idAt(base, 3)
		b, _ := testTicket(id, "t").Encode()
		writeString(t, s.osPath(queueDir, queue.TicketName(id)), string(b))
		writeString(t, s.osPath(queueDir, queue.LockName(id)), "")
		l := find(LeftoverTicket, s.osPath(queueDir, queue.TicketName(id)))
		holdLock(t, s, queueDir, queue.LockName(id))
		expectKept(l)
	})
	t.Run("queue lock taken meanwhile", func(t *testing.T) {
		id := idAt(base, 4)
		writeString(t, s.osPath(queueDir, queue.LockName(id)), "")
		l := find(LeftoverQueueLock, s.osPath(queueDir, queue.LockName(id)))
		holdLock(t, s, queueDir, queue.LockName(id))
		expectKept(l)
	})
	t.Run("ticket written meanwhile", func(t *testing.T) {
		id := idAt(base, 5)
		writeString(t, s.osPath(queueDir, queue.LockName(id)), "")
		l := find(LeftoverQueueLock, s.osPath(queueDir, queue.LockName(id)))
		b, _ := testTicket(id, "t").Encode()
		writeString(t, s.osPath(queueDir, queue.TicketName(id)), string(b))
		expectKept(l)
	})
	t.Run("stop request's run reserved meanwhile", func(t *testing.T) {
		id := idAt(base, 8)
		writeString(t, s.osPath(ownersDir, stopRequestName(id)), "{}")
		l := find(LeftoverStop, s.osPath(ownersDir, stopRequestName(id)))
		mustWriteActive(t, s, testRecord(id, record.Provisioning))
		expectKept(l)
	})
	t.Run("log's run finished meanwhile", func(t *testing.T) {
		id := idAt(base, 6)
		writeString(t, s.Logs().LogPath(id), "")
		l := find(LeftoverLog, s.Logs().LogPath(id))
		mustWriteDone(t, s, testRecord(id, record.Failed))
		expectKept(l)
	})
	t.Run("temp file's run being written", func(t *testing.T) {
		id := idAt(base, 7)
		tmp := s.osPath(activeDir, "."+recordName(id)+"0123456789abcdef")
		writeString(t, tmp, "")
		l := find(LeftoverTemp, tmp)
		writeString(t, s.osPath(ownersDir, ownerLockName(id)), "")
		holdLock(t, s, ownersDir, ownerLockName(id))
		expectKept(l)
	})
}

// The cross-process case: a waiting start SIGKILLed leaves its ticket, its
// lock and its bell; while it lives they are not leftovers, once it is
// dead they are, and removing the ticket takes all three.
func TestLeftoverTicketOfAKilledWaiter(t *testing.T) {
	s := newStore(t)
	id := idAt(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), 1)
	h := startHelper(t, "enqueue", s.Root(), helperID+"="+string(id))
	h.Expect("queued")
	if ls := mustLeftovers(t, s); len(ls) != 0 {
		t.Fatalf("a living waiter's files listed as leftovers: %v", ls)
	}
	a := lockAdmission(t, s)
	if a.RemoveDeadTicket(id) {
		t.Fatal("RemoveDeadTicket removed a living waiter's ticket")
	}
	a.Release()
	h.Kill()
	ls := mustLeftovers(t, s)
	if len(ls) != 1 || ls[0].Kind != LeftoverTicket || ls[0].ID != id || ls[0].Task != "queued-task" {
		t.Fatalf("leftovers after the waiter was killed = %+v, want its ticket", ls)
	}
	a = lockAdmission(t, s)
	if removed, err := a.RemoveLeftover(ls[0]); !removed || err != nil {
		t.Fatalf("RemoveLeftover = %v, %v", removed, err)
	}
	assertOnlyFiles(t, s.osPath(queueDir))
}

// A lock file left by a reservation cut short (crash before the record)
// is a leftover once its holder is dead, not before.
func TestLeftoverLockOfAKilledReserver(t *testing.T) {
	s := newStore(t)
	id := idAt(time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC), 1)
	h := startHelper(t, "reserve", s.Root(), helperID+"="+string(id))
	h.Expect("reserved")
	// The record goes (as a crash between lock and record would leave it).
	if err := os.Remove(s.ActivePath(id)); err != nil {
		t.Fatal(err)
	}
	if ls := mustLeftovers(t, s); len(ls) != 0 {
		t.Fatalf("a living holder's lock files listed as leftovers: %v", ls)
	}
	h.Kill()
	ls := mustLeftovers(t, s)
	if len(ls) != 2 {
		t.Fatalf("leftovers after the holder was killed = %+v, want its two lock files", ls)
	}
	a := lockAdmission(t, s)
	for _, l := range ls {
		if l.Kind != LeftoverLock || l.ID != id {
			t.Errorf("leftover %+v, want a lock of %s", l, id)
		}
		if removed, err := a.RemoveLeftover(l); !removed || err != nil {
			t.Errorf("RemoveLeftover = %v, %v", removed, err)
		}
	}
	assertOnlyFiles(t, s.osPath(ownersDir))
	// Removing is taking the lock first: nobody else could have it.
	if _, err := lockfs.Take(mustOpenRoot(t, s.osPath(ownersDir)), ownerLockName(id)); !errors.Is(err, lockfs.ErrGone) {
		t.Errorf("Take after removal = %v, want ErrGone", err)
	}
}

// Leftover listings never follow links or block on FIFOs planted where
// temporary files would be, and never remove them either (they are not
// regular files crew made).
func TestLeftoversIgnoreWhatIsNotARegularFile(t *testing.T) {
	s := newStore(t)
	outside := filepath.Join(t.TempDir(), "victim")
	writeString(t, outside, "precious")
	if err := os.Symlink(outside, s.osPath(activeDir, ".link0123")); err != nil {
		t.Fatal(err)
	}
	mkfifo(t, s.osPath(activeDir, ".fifo0123"))
	if ls := mustLeftovers(t, s); len(ls) != 0 {
		t.Errorf("Leftovers = %+v, want none", ls)
	}
	if readString(t, outside) != "precious" {
		t.Error("the link's target changed")
	}
}

// A finisher moves a run's lock files into owners/.released, removes them
// there and only then lets go; a crash between the move and the removal
// leaves them there, where no listing of owners/ sees them. Recover removes
// them, except one still held (a finisher at work).
func TestLeftoverLocksInReleased(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC)
	crashed, finishing := idAt(base, 1), idAt(base, 2)
	released := filepath.Join(s.osPath(ownersDir), releasedDir)
	if err := os.MkdirAll(released, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ownerLockName(crashed), supervisorLockName(crashed), ownerLockName(finishing)} {
		if err := os.WriteFile(filepath.Join(released, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	held, err := lockfs.Take(mustOpenRoot(t, released), ownerLockName(finishing))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	ls := mustLeftovers(t, s)
	if len(ls) != 2 {
		t.Fatalf("leftovers = %+v, want the crashed run's two lock files", ls)
	}
	a := lockAdmission(t, s)
	for _, l := range ls {
		if l.Kind != LeftoverLock || l.ID != crashed || !strings.Contains(l.Path, "/owners/.released/") {
			t.Errorf("leftover %+v, want a lock of %s in owners/.released", l, crashed)
		}
		if removed, err := a.RemoveLeftover(l); !removed || err != nil {
			t.Errorf("RemoveLeftover = %v, %v", removed, err)
		}
	}
	names, err := os.ReadDir(released)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0].Name() != ownerLockName(finishing) {
		t.Errorf("owners/.released holds %v, want only the held lock", names)
	}
}
