package runstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/stateroot"
)

// The layout (see the package comment), as the paths messages show.
func TestLayoutPaths(t *testing.T) {
	s := New("/state")
	id := testID
	want := map[string]string{
		"ConfigPath":    "/state/crew.json",
		"holder":        "/state/.locks/dispatch-admission.holder",
		"ActivePath":    "/state/runs/active/" + string(id) + ".run",
		"shard":         "/state/runs/done/2024-01-02T03",
		"DonePath":      "/state/runs/done/2024-01-02T03/" + string(id) + ".run",
		"owner":         "/state/owners/" + string(id) + ".lock",
		"supervisor":    "/state/owners/" + string(id) + ".supervisor.lock",
		"stop":          "/state/owners/" + string(id) + ".stop",
		"LogPath":       "/state/logs/" + string(id) + ".log",
		"ticket":        "/state/queue/" + string(id) + ".json",
		"ticketLock":    "/state/queue/" + string(id) + ".lock",
		"bell":          "/state/queue/" + string(id) + ".bell",
		"quarantineDir": "/state/quarantine",
		"refusals":      "/state/refusals.log",
	}
	got := map[string]string{
		"ConfigPath":    s.ConfigPath(),
		"holder":        s.display(locksDir, holderName),
		"ActivePath":    s.ActivePath(id),
		"shard":         s.display(shardDir(id)),
		"DonePath":      s.DonePath(id),
		"owner":         s.display(ownersDir, ownerLockName(id)),
		"supervisor":    s.display(ownersDir, supervisorLockName(id)),
		"stop":          s.display(ownersDir, stopRequestName(id)),
		"LogPath":       s.Logs().LogPath(id),
		"ticket":        s.display(queueDir, queue.TicketName(id)),
		"ticketLock":    s.display(queueDir, queue.LockName(id)),
		"bell":          s.display(queueDir, queue.BellName(id)),
		"quarantineDir": s.display(quarantineDir),
		"refusals":      s.display(refusalsName),
	}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("%s = %q, want %q", k, got[k], want[k])
		}
	}
	if s.Root() != "/state" {
		t.Errorf("Root() = %q", s.Root())
	}
	if Shard(id) != "2024-01-02T03" {
		t.Errorf("Shard(%s) = %q", id, Shard(id))
	}
	// The admission lock lives alone in its own directory: no run's file
	// can ever collide with it.
	for k, p := range got {
		if k != "admission" && k != "holder" && filepath.Dir(p) == s.display(locksDir) {
			t.Errorf("%s (%s) shares the locks directory", k, p)
		}
	}
	// The files of one run, and of two runs, never share a name.
	other := record.RunID(strings.Replace(string(id), "0123456789abcdef", "0123456789abcdee", 1))
	var paths []string
	for _, i := range []record.RunID{id, other} {
		paths = append(paths, s.display(ownersDir, ownerLockName(i)), s.display(ownersDir, supervisorLockName(i)),
			s.display(ownersDir, stopRequestName(i)), s.display(queueDir, queue.TicketName(i)),
			s.display(queueDir, queue.LockName(i)), s.display(queueDir, queue.BellName(i)))
	}
	if len(slices.Compact(slices.Sorted(slices.Values(paths)))) != len(paths) {
		t.Errorf("file names collide: %q", paths)
	}
}

func TestEnsure(t *testing.T) {
	root := filepath.Join(t.TempDir(), "state")
	s := New(root)
	defer s.Close()
	if s.Exists() {
		t.Fatal("Exists() before Ensure")
	}
	if err := s.Ensure(); err != nil {
		t.Fatal(err)
	}
	if !s.Exists() {
		t.Fatal("Exists() = false after Ensure")
	}
	assertMode(t, root, DirPerm)
	for _, dir := range []string{locksDir, activeDir, doneDir, ownersDir, logsDir, queueDir} {
		fi, err := os.Stat(s.osPath(dir))
		if err != nil || !fi.IsDir() {
			t.Fatalf("Ensure did not create %s: %v", dir, err)
		}
		assertMode(t, s.osPath(dir), DirPerm)
	}
	// Idempotent, and it leaves existing content alone.
	writeString(t, s.osPath(activeDir, "keep"), "x")
	if err := s.Ensure(); err != nil {
		t.Fatal(err)
	}
	if readString(t, s.osPath(activeDir, "keep")) != "x" {
		t.Error("second Ensure disturbed existing files")
	}
	// A store that only reads creates nothing.
	missing := New(filepath.Join(t.TempDir(), "none"))
	if _, err := missing.ListActive(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := missing.LoadConfig(); err != nil {
		t.Fatal(err)
	}
	if _, err := missing.Leftovers(); err != nil {
		t.Fatal(err)
	}
	missing.OwnerState(testID, nil)
	missing.Queue().Ring(testID)
	assertMissing(t, missing.Root())
}

// Ensure skips looking at the layout right after opening the root found it
// complete, but makes a directory removed before a process opened the
// root, or removed after its first Ensure.
func TestEnsureMakesWhatWasRemoved(t *testing.T) {
	s := newStore(t)
	for _, dir := range []string{queueDir, activeDir} {
		// A new process, on a complete layout: its first Ensure need
		// not look; its next one (a waiter's next attempt) must.
		next := New(s.Root())
		if err := next.Ensure(); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(s.osPath(dir)); err != nil {
			t.Fatal(err)
		}
		if err := next.Ensure(); err != nil {
			t.Fatal(err)
		}
		assertMode(t, s.osPath(dir), DirPerm)
		next.Close()
		// A new process whose first open finds the layout incomplete.
		if err := os.Remove(s.osPath(dir)); err != nil {
			t.Fatal(err)
		}
		other := New(s.Root())
		if err := other.Ensure(); err != nil {
			t.Fatal(err)
		}
		assertMode(t, s.osPath(dir), DirPerm)
		other.Close()
	}
}

func TestEnsureRootIsAFile(t *testing.T) {
	root := filepath.Join(t.TempDir(), "state")
	writeString(t, root, "not a directory")
	err := New(root).Ensure()
	if err == nil {
		t.Fatal("Ensure with the root being a file succeeded")
	}
	if !strings.Contains(err.Error(), root) {
		t.Errorf("error %q does not name the root", err)
	}
}

// A layout directory replaced by a file is refused with a message that
// names it and says what to do; nothing is created in its place.
func TestEnsureLayoutDirIsAFile(t *testing.T) {
	s := newStore(t)
	if err := os.RemoveAll(s.osPath(queueDir)); err != nil {
		t.Fatal(err)
	}
	writeString(t, s.osPath(queueDir), "x")
	err := New(s.Root()).Ensure()
	if err == nil || !strings.Contains(err.Error(), s.osPath(queueDir)) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("Ensure with queue/ a file = %v, want an error naming it", err)
	}
	if readString(t, s.osPath(queueDir)) != "x" {
		t.Error("Ensure changed the file")
	}
}

func TestWriteActiveAndReadBack(t *testing.T) {
	s := newStore(t)
	rec := testRecord(testID, record.Provisioning)
	mustWriteActive(t, s, rec)
	got, err := s.ReadActive(testID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("ReadActive = %+v, want %+v", got, rec)
	}
	assertMode(t, s.ActivePath(testID), FilePerm)

	rec.State = record.Running
	started := rec.CreatedAt.Add(time.Second)
	rec.StartedAt = &started
	if err := s.UpdateActive(rec); err != nil {
		t.Fatal(err)
	}
	got, err = s.ReadActive(testID)
	if err != nil || got.State != record.Running || got.StartedAt == nil {
		t.Fatalf("after UpdateActive: %+v, %v", got, err)
	}
	assertOnlyFiles(t, s.osPath(activeDir), string(testID)+".json")
	if !s.ActiveFileExists(string(testID) + ".json") {
		t.Error("ActiveFileExists = false")
	}
}

func TestWriteActiveMissingDir(t *testing.T) {
	s := New(t.TempDir()) // no Ensure
	defer s.Close()
	err := s.writeActive(testRecord(testID, record.Provisioning), durable)
	if err == nil {
		t.Fatal("writing a record without an active directory succeeded")
	}
	if !strings.Contains(err.Error(), string(testID)) || !strings.Contains(err.Error(), "provisioning") {
		t.Errorf("error %q does not name the run and state", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %q does not wrap ErrNotExist", err)
	}
	if err := s.UpdateActive(testRecord(testID, record.Running)); err == nil {
		t.Error("UpdateActive without an active directory succeeded")
	}
}

func TestReadActiveErrorsNameTheFile(t *testing.T) {
	s := newStore(t)
	path := s.ActivePath(testID)
	writeString(t, path, "{")
	_, err := s.ReadActive(testID)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("ReadActive(corrupt) = %v, want an error naming %s", err, path)
	}
	missing := idAt(time.Now(), 1)
	_, err = s.ReadActive(missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), s.ActivePath(missing)) {
		t.Fatalf("ReadActive(missing) = %v, want ErrNotExist naming %s", err, s.ActivePath(missing))
	}
	// Over the size limit: not read at all.
	big := idAt(time.Now(), 2)
	writeString(t, s.ActivePath(big), `{"version":1,"pad":"`+strings.Repeat("x", MaxRecordBytes)+`"}`)
	_, err = s.ReadActive(big)
	if err == nil || !strings.Contains(err.Error(), s.ActivePath(big)) || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("ReadActive(oversized) = %v, want a size error naming the file", err)
	}
}

func TestWriteDoneRejectsActiveStates(t *testing.T) {
	s := newStore(t)
	for _, st := range []record.State{record.Provisioning, record.Running} {
		err := s.writeDone(testRecord(testID, st))
		if err == nil || !strings.Contains(err.Error(), "not final") {
			t.Errorf("writeDone(%s) = %v, want a not-final error", st, err)
		}
	}
	assertOnlyFiles(t, s.osPath(doneDir))
	if s.IsDone(testID) {
		t.Error("IsDone after rejected writeDone")
	}
}

func TestWriteDoneRemoveActiveIsDone(t *testing.T) {
	s := newStore(t)
	hour := time.Date(2024, 1, 2, 12, 0, 0, 0, time.UTC)
	a, b := idAt(hour, 1), idAt(hour.Add(time.Minute), 2)
	for _, id := range []record.RunID{a, b} {
		mustWriteActive(t, s, testRecord(id, record.Running))
	}
	if s.IsDone(a) {
		t.Fatal("IsDone before writeDone")
	}
	for _, id := range []record.RunID{a, b} { // second one: the shard exists
		mustWriteDone(t, s, testRecord(id, record.Succeeded))
		if !s.IsDone(id) {
			t.Fatalf("IsDone(%s) = false after writeDone", id)
		}
	}
	assertOnlyFiles(t, s.osPath(doneDir), "2024-01-02T12")
	assertOnlyFiles(t, s.osPath(shardDir(a)), string(a)+".run", string(b)+".run")
	assertMode(t, s.osPath(shardDir(a)), DirPerm)
	assertMode(t, s.DonePath(a), FilePerm)

	if err := s.removeActive(a); err != nil {
		t.Fatal(err)
	}
	if err := s.removeActive(a); err != nil {
		t.Errorf("removeActive twice = %v, want nil", err)
	}
	assertOnlyFiles(t, s.osPath(activeDir), string(b)+".json")
}

// crew prune removes empty shards; a run finishing into a shard that was
// removed after this store opened it makes it again.
func TestWriteDoneRecreatesARemovedShard(t *testing.T) {
	s := newStore(t)
	hour := time.Date(2024, 1, 2, 12, 0, 0, 0, time.UTC)
	a, b := idAt(hour, 1), idAt(hour.Add(time.Minute), 2)
	mustWriteDone(t, s, testRecord(a, record.Succeeded))
	if err := os.RemoveAll(s.osPath(shardDir(a))); err != nil {
		t.Fatal(err)
	}
	mustWriteDone(t, s, testRecord(b, record.Succeeded))
	if !s.IsDone(b) {
		t.Fatal("IsDone = false after writing into a removed shard")
	}
	assertOnlyFiles(t, s.osPath(shardDir(b)), string(b)+".run")
}

func TestWriteDoneMissingDoneDir(t *testing.T) {
	s := New(t.TempDir())
	defer s.Close()
	err := s.writeDone(testRecord(testID, record.Failed))
	if err == nil {
		t.Fatal("writeDone without runs/done succeeded")
	}
	if !strings.Contains(err.Error(), string(testID)) {
		t.Errorf("error %q does not name the run", err)
	}
}

func TestListActiveMissingDir(t *testing.T) {
	ents, err := New(filepath.Join(t.TempDir(), "nothing")).ListActive()
	if err != nil || ents != nil {
		t.Fatalf("ListActive(no state root) = %v, %v; want nil, nil", ents, err)
	}
}

func TestListActiveEmpty(t *testing.T) {
	ents, err := newStore(t).ListActive()
	if err != nil || len(ents) != 0 {
		t.Fatalf("ListActive(empty) = %v, %v", ents, err)
	}
}

func TestListActive(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 6, 1, 10, 0, 0, 0, time.UTC)
	live1, live2 := idAt(base, 1), idAt(base.Add(time.Second), 2)
	corrupt, empty, mismatched := idAt(base, 3), idAt(base, 4), idAt(base, 5)
	finished, finishedCorrupt, terminal := idAt(base, 6), idAt(base, 7), idAt(base, 8)
	oversized, linked, fifo := idAt(base, 9), idAt(base, 10), idAt(base, 11)

	mustWriteActive(t, s, testRecord(live1, record.Provisioning))
	mustWriteActive(t, s, testRecord(live2, record.Running))
	// A terminal record still in the active set (owner finishing up) is
	// listed as a record; holding a slot is the caller's call.
	mustWriteActive(t, s, testRecord(terminal, record.Failed))
	writeString(t, s.ActivePath(corrupt), `{"version":1,"runId":`)
	writeString(t, s.ActivePath(empty), "")
	other := testRecord(live1, record.Running) // content says live1
	b, _ := other.Encode()
	writeString(t, s.ActivePath(mismatched), string(b))
	// Finished: the done record exists, the active one is a leftover.
	mustWriteActive(t, s, testRecord(finished, record.Running))
	mustWriteDone(t, s, testRecord(finished, record.Succeeded))
	writeString(t, s.ActivePath(finishedCorrupt), "garbage")
	mustWriteDone(t, s, testRecord(finishedCorrupt, record.Interrupted))
	// Unreadable by kind or size: reported, never read (nor waited on).
	writeString(t, s.ActivePath(oversized), string(b)+strings.Repeat(" ", MaxRecordBytes))
	good, _ := testRecord(linked, record.Running).Encode()
	outside := filepath.Join(t.TempDir(), "elsewhere.json")
	writeString(t, outside, string(good))
	if err := os.Symlink(outside, s.ActivePath(linked)); err != nil {
		t.Fatal(err)
	}
	mkfifo(t, s.ActivePath(fifo))

	// Skipped: dot-files (leftover temporaries of interrupted writes).
	writeString(t, s.osPath(activeDir, "."+string(live1)+".json123456789"), "{torn")
	writeString(t, s.osPath(activeDir, ".hidden"), "x")
	// Reported: foreign files.
	foreign := []string{
		"notes.txt",
		"r-bad.json",
		string(live1),            // no .json
		string(live1) + ".json~", // editor backup
		string(live1) + ".JSON",
		"dispatch-admission.json",
	}
	for _, name := range foreign {
		writeString(t, s.osPath(activeDir, name), "{}")
	}
	mkdirAll(t, s.osPath(activeDir, "subdir"))
	foreign = append(foreign, "subdir")

	ents, err := returnsAtOnce(t, "ListActive", func() ([]backend.ActiveEntry, error) { return s.ListActive() })
	if err != nil {
		t.Fatalf("ListActive = %v; a bad file must never fail the listing", err)
	}
	byName := map[string]backend.ActiveEntry{}
	// Records written as JSON (mustWriteActive) are <id>.json; what the
	// test plants at ActivePath is <id>.run: the listing treats both alike.
	byID := func(id record.RunID) (backend.ActiveEntry, bool) {
		if e, ok := byName[string(id)+".json"]; ok {
			return e, ok
		}
		e, ok := byName[string(id)+".run"]
		return e, ok
	}
	for _, e := range ents {
		if filepath.Dir(e.Path) != s.osPath(activeDir) || filepath.Base(e.Path) != e.Name {
			t.Errorf("entry %s has path %s, not in the active directory", e.Name, e.Path)
		}
		if _, dup := byName[e.Name]; dup {
			t.Errorf("%s listed twice", e.Name)
		}
		byName[e.Name] = e
		if stateroot.IsTempName(e.Name) {
			t.Errorf("dot-file %s listed", e.Name)
		}
	}
	if want := 11 + len(foreign); len(ents) != want {
		t.Errorf("ListActive returned %d entries, want %d", len(ents), want)
	}

	for _, id := range []record.RunID{live1, live2, terminal} {
		e, ok := byID(id)
		if !ok {
			t.Fatalf("%s not listed", id)
		}
		// A final record in the active set (a finish whose move was cut
		// short) is a finished leftover: it holds no slot.
		if e.Err != nil || e.Rec == nil || e.Finished != (id == terminal) || e.ID != id || e.Rec.RunID != id {
			t.Errorf("entry %s = %+v, want a readable record", id, e)
		}
	}
	if e, _ := byID(live2); e.Rec != nil && e.Rec.State != record.Running {
		t.Errorf("live2 state = %s", e.Rec.State)
	}

	for _, id := range []record.RunID{corrupt, empty, mismatched, oversized, linked, fifo} {
		e, ok := byID(id)
		if !ok {
			t.Fatalf("unreadable %s not listed", id)
		}
		if e.Err == nil || e.Rec != nil || e.Finished {
			t.Errorf("entry %s = %+v, want Err and no Rec", id, e)
			continue
		}
		if e.ID != id {
			t.Errorf("entry %s has ID %q; the file name is a run id, so it should be kept", id, e.ID)
		}
		if !strings.Contains(e.Err.Error(), e.Path) {
			t.Errorf("error %q does not name %s", e.Err, e.Path)
		}
	}
	if e, _ := byID(mismatched); e.Err != nil && !strings.Contains(e.Err.Error(), string(live1)) {
		t.Errorf("mismatch error %q does not say what the record claims", e.Err)
	}
	for id, says := range map[record.RunID]string{oversized: "over the limit", linked: "symbolic link", fifo: "FIFO"} {
		if e, _ := byID(id); e.Err != nil && !strings.Contains(e.Err.Error(), says) {
			t.Errorf("error %q does not say %q", e.Err, says)
		}
	}

	for _, id := range []record.RunID{finished, finishedCorrupt} {
		e, ok := byID(id)
		if !ok {
			t.Fatalf("finished %s not listed", id)
		}
		if !e.Finished || e.ID != id || e.Err != nil {
			t.Errorf("entry %s = %+v, want Finished", id, e)
		}
	}

	for _, name := range foreign {
		e, ok := byName[name]
		if !ok {
			t.Errorf("foreign file %s not reported", name)
			continue
		}
		if e.ID != "" || e.Rec != nil || e.Finished || e.Err == nil {
			t.Errorf("foreign entry %s = %+v, want Err and no ID", name, e)
			continue
		}
		if !strings.Contains(e.Err.Error(), "foreign") || !strings.Contains(e.Err.Error(), e.Path) {
			t.Errorf("foreign error %q does not say what and where", e.Err)
		}
	}

	// Every non-finished entry has exactly one of Rec and Err.
	for _, e := range ents {
		if !e.Finished && (e.Rec == nil) == (e.Err == nil) {
			t.Errorf("entry %s: Rec %v, Err %v; want exactly one", e.Path, e.Rec, e.Err)
		}
	}
	if readString(t, outside) != string(good) {
		t.Error("the link's target changed")
	}
}

func TestListActiveAfterRemoveActive(t *testing.T) {
	s := newStore(t)
	id := idAt(time.Now(), 1)
	mustWriteActive(t, s, testRecord(id, record.Running))
	mustWriteDone(t, s, testRecord(id, record.Stopped))
	ents, _ := s.ListActive()
	if len(ents) != 1 || !ents[0].Finished {
		t.Fatalf("between writeDone and removeActive: %+v, want one Finished entry", ents)
	}
	if err := s.removeActive(id); err != nil {
		t.Fatal(err)
	}
	ents, err := s.ListActive()
	if err != nil || len(ents) != 0 {
		t.Fatalf("after removeActive: %+v, %v", ents, err)
	}
}

func TestReadRun(t *testing.T) {
	s := newStore(t)
	id := idAt(time.Date(2024, 2, 3, 4, 5, 6, 7, time.UTC), 9)

	_, err := s.ReadRun(id)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), string(id)) {
		t.Fatalf("ReadRun(unknown) = %v, want ErrNotExist naming the run", err)
	}

	mustWriteActive(t, s, testRecord(id, record.Running))
	got, err := s.ReadRun(id)
	if err != nil || got.State != record.Running {
		t.Fatalf("ReadRun(active only) = %+v, %v", got, err)
	}

	done := testRecord(id, record.Failed)
	done.Reason = "exit status 2"
	mustWriteDone(t, s, done)
	// Both exist: the finished record wins.
	got, err = s.ReadRun(id)
	if err != nil || got.State != record.Failed || got.Reason != "exit status 2" {
		t.Fatalf("ReadRun(active and done) = %+v, %v; want the done record", got, err)
	}

	if err := s.removeActive(id); err != nil {
		t.Fatal(err)
	}
	got, err = s.ReadRun(id)
	if err != nil || got.State != record.Failed {
		t.Fatalf("ReadRun(done only) = %+v, %v", got, err)
	}
	if got, err := s.ReadDone(id); err != nil || got.State != record.Failed {
		t.Fatalf("ReadDone = %+v, %v", got, err)
	}
}

func TestReadRunCorruptDoneIsAnError(t *testing.T) {
	// A corrupt finished record is reported, not papered over with the
	// stale active one (which would show a finished run as running).
	s := newStore(t)
	id := idAt(time.Now(), 3)
	mustWriteActive(t, s, testRecord(id, record.Running))
	mkdirAll(t, s.osPath(shardDir(id)))
	writeString(t, s.DonePath(id), "{trunc")
	rec, err := s.ReadRun(id)
	if err == nil {
		t.Fatalf("ReadRun = %+v, want the corrupt done record's error", rec)
	}
	if !strings.Contains(err.Error(), s.DonePath(id)) {
		t.Errorf("error %q does not name %s", err, s.DonePath(id))
	}
}

func TestReadRunCorruptActive(t *testing.T) {
	s := newStore(t)
	id := idAt(time.Now(), 4)
	writeString(t, s.ActivePath(id), "")
	_, err := s.ReadRun(id)
	if err == nil || errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), s.ActivePath(id)) {
		t.Fatalf("ReadRun(empty active) = %v, want a decode error naming the file", err)
	}
}
