package runstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func newStore(t testing.TB) Store {
	t.Helper()
	s := New(t.TempDir())
	if err := s.Ensure(); err != nil {
		t.Fatal(err)
	}
	return s
}

// idAt makes a deterministic run id for a creation time and a suffix.
func idAt(tm time.Time, n int) RunID {
	return RunID(fmt.Sprintf("r-%s-%016x", tm.UTC().Format(runIDTime), n))
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLayoutPaths(t *testing.T) {
	l := Layout{Root: "/state"}
	id := testID
	want := map[string]string{
		"ConfigPath":          "/state/crew.json",
		"LocksDir":            "/state/.locks",
		"AdmissionLockPath":   "/state/.locks/dispatch-admission.lock",
		"AdmissionHolderPath": "/state/.locks/dispatch-admission.holder",
		"ActiveDir":           "/state/runs/active",
		"DoneDir":             "/state/runs/done",
		"OwnersDir":           "/state/owners",
		"LogsDir":             "/state/logs",
		"QuarantineDir":       "/state/quarantine",
		"ActivePath":          "/state/runs/active/" + string(id) + ".json",
		"DoneShardDir":        "/state/runs/done/2024-01-02T03",
		"DonePath":            "/state/runs/done/2024-01-02T03/" + string(id) + ".json",
		"OwnerLockPath":       "/state/owners/" + string(id) + ".lock",
		"SupervisorLockPath":  "/state/owners/" + string(id) + ".supervisor.lock",
		"LogPath":             "/state/logs/" + string(id) + ".log",
	}
	got := map[string]string{
		"ConfigPath":          l.ConfigPath(),
		"LocksDir":            l.LocksDir(),
		"AdmissionLockPath":   l.AdmissionLockPath(),
		"AdmissionHolderPath": l.AdmissionHolderPath(),
		"ActiveDir":           l.ActiveDir(),
		"DoneDir":             l.DoneDir(),
		"OwnersDir":           l.OwnersDir(),
		"LogsDir":             l.LogsDir(),
		"QuarantineDir":       l.QuarantineDir(),
		"ActivePath":          l.ActivePath(id),
		"DoneShardDir":        l.DoneShardDir(id),
		"DonePath":            l.DonePath(id),
		"OwnerLockPath":       l.OwnerLockPath(id),
		"SupervisorLockPath":  l.SupervisorLockPath(id),
		"LogPath":             l.LogPath(id),
	}
	if !reflect.DeepEqual(got, want) {
		for k := range want {
			if got[k] != want[k] {
				t.Errorf("%s = %q, want %q", k, got[k], want[k])
			}
		}
	}
	// The admission lock lives alone in its own directory: no run's file
	// can ever collide with it.
	for _, p := range []string{l.ActivePath(id), l.OwnerLockPath(id), l.SupervisorLockPath(id), l.LogPath(id), l.DonePath(id)} {
		if filepath.Dir(p) == l.LocksDir() {
			t.Errorf("%s shares the locks directory", p)
		}
	}
	// The owner and supervisor locks of one run, and of two runs, differ.
	other := RunID(strings.Replace(string(id), "0123456789abcdef", "0123456789abcdee", 1))
	paths := []string{l.OwnerLockPath(id), l.SupervisorLockPath(id), l.OwnerLockPath(other), l.SupervisorLockPath(other)}
	if len(slices.Compact(slices.Sorted(slices.Values(paths)))) != 4 {
		t.Errorf("lock paths collide: %q", paths)
	}
}

func TestEnsure(t *testing.T) {
	root := filepath.Join(t.TempDir(), "state")
	l := Layout{Root: root}
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{l.LocksDir(), l.ActiveDir(), l.DoneDir(), l.OwnersDir(), l.LogsDir()} {
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() {
			t.Fatalf("Ensure did not create %s: %v", dir, err)
		}
		assertMode(t, dir, DirPerm)
	}
	// Idempotent, and it leaves existing content alone.
	writeFile(t, filepath.Join(l.ActiveDir(), "keep"), "x")
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	if readString(t, filepath.Join(l.ActiveDir(), "keep")) != "x" {
		t.Error("second Ensure disturbed existing files")
	}
}

func TestEnsureRootIsAFile(t *testing.T) {
	root := filepath.Join(t.TempDir(), "state")
	writeFile(t, root, "not a directory")
	err := Layout{Root: root}.Ensure()
	if err == nil {
		t.Fatal("Ensure with the root being a file succeeded")
	}
	if !strings.Contains(err.Error(), root) {
		t.Errorf("error %q does not name the root", err)
	}
}

func TestWriteActiveAndReadBack(t *testing.T) {
	s := newStore(t)
	rec := testRecord(testID, Provisioning)
	if err := s.WriteActive(rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadRecord(s.ActivePath(testID))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("ReadRecord = %+v, want %+v", got, rec)
	}
	assertMode(t, s.ActivePath(testID), FilePerm)

	rec.State = Running
	started := rec.CreatedAt.Add(time.Second)
	rec.StartedAt = &started
	if err := s.UpdateActive(rec); err != nil {
		t.Fatal(err)
	}
	got, err = s.ReadRecord(s.ActivePath(testID))
	if err != nil || got.State != Running || got.StartedAt == nil {
		t.Fatalf("after UpdateActive: %+v, %v", got, err)
	}
	assertOnlyFiles(t, s.ActiveDir(), string(testID)+".json")
}

func TestWriteActiveMissingDir(t *testing.T) {
	s := New(t.TempDir()) // no Ensure
	err := s.WriteActive(testRecord(testID, Provisioning))
	if err == nil {
		t.Fatal("WriteActive without an active directory succeeded")
	}
	if !strings.Contains(err.Error(), string(testID)) || !strings.Contains(err.Error(), "provisioning") {
		t.Errorf("error %q does not name the run and state", err)
	}
}

func TestReadRecordErrorsNameTheFile(t *testing.T) {
	s := newStore(t)
	path := s.ActivePath(testID)
	writeFile(t, path, "{")
	_, err := s.ReadRecord(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("ReadRecord(corrupt) = %v, want an error naming %s", err, path)
	}
	missing := s.ActivePath(idAt(time.Now(), 1))
	_, err = s.ReadRecord(missing)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("ReadRecord(missing) = %v, want ErrNotExist naming %s", err, missing)
	}
}

func TestWriteDoneRejectsActiveStates(t *testing.T) {
	s := newStore(t)
	for _, st := range []State{Provisioning, Running} {
		err := s.WriteDone(testRecord(testID, st))
		if err == nil || !strings.Contains(err.Error(), "not final") {
			t.Errorf("WriteDone(%s) = %v, want a not-final error", st, err)
		}
	}
	assertOnlyFiles(t, s.DoneDir())
	if s.IsDone(testID) {
		t.Error("IsDone after rejected WriteDone")
	}
}

func TestWriteDoneRemoveActiveIsDone(t *testing.T) {
	s := newStore(t)
	day := time.Date(2024, 1, 2, 12, 0, 0, 0, time.UTC)
	a, b := idAt(day, 1), idAt(day.Add(time.Minute), 2)
	for _, id := range []RunID{a, b} {
		if err := s.WriteActive(testRecord(id, Running)); err != nil {
			t.Fatal(err)
		}
	}
	if s.IsDone(a) {
		t.Fatal("IsDone before WriteDone")
	}
	for _, id := range []RunID{a, b} { // second one: day directory exists
		if err := s.WriteDone(testRecord(id, Succeeded)); err != nil {
			t.Fatal(err)
		}
		if !s.IsDone(id) {
			t.Fatalf("IsDone(%s) = false after WriteDone", id)
		}
	}
	assertOnlyFiles(t, s.DoneDir(), "2024-01-02T12")
	assertOnlyFiles(t, s.DoneShardDir(a), string(a)+".json", string(b)+".json")
	assertMode(t, s.DoneShardDir(a), DirPerm)
	assertMode(t, s.DonePath(a), FilePerm)

	if err := s.RemoveActive(a); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveActive(a); err != nil {
		t.Errorf("RemoveActive twice = %v, want nil", err)
	}
	assertOnlyFiles(t, s.ActiveDir(), string(b)+".json")
}

func TestWriteDoneMissingDoneDir(t *testing.T) {
	s := New(t.TempDir())
	err := s.WriteDone(testRecord(testID, Failed))
	if err == nil {
		t.Fatal("WriteDone without runs/done succeeded")
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

	mustWrite := func(rec *Record) {
		t.Helper()
		if err := s.WriteActive(rec); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(testRecord(live1, Provisioning))
	mustWrite(testRecord(live2, Running))
	// A terminal record still in the active set (owner finishing up) is
	// listed as a record; holding a slot is the caller's call.
	mustWrite(testRecord(terminal, Failed))
	writeFile(t, s.ActivePath(corrupt), `{"version":1,"runId":`)
	writeFile(t, s.ActivePath(empty), "")
	other := testRecord(live1, Running) // content says live1
	b, _ := other.Encode()
	writeFile(t, s.ActivePath(mismatched), string(b))
	// Finished: the done record exists, the active one is a leftover.
	mustWrite(testRecord(finished, Running))
	if err := s.WriteDone(testRecord(finished, Succeeded)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, s.ActivePath(finishedCorrupt), "garbage")
	if err := s.WriteDone(testRecord(finishedCorrupt, Interrupted)); err != nil {
		t.Fatal(err)
	}

	// Skipped: dot-files (leftover temporaries of interrupted writes).
	writeFile(t, filepath.Join(s.ActiveDir(), "."+string(live1)+".json123456789"), "{torn")
	writeFile(t, filepath.Join(s.ActiveDir(), ".hidden"), "x")
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
		writeFile(t, filepath.Join(s.ActiveDir(), name), "{}")
	}
	if err := os.Mkdir(filepath.Join(s.ActiveDir(), "subdir"), 0o700); err != nil {
		t.Fatal(err)
	}
	foreign = append(foreign, "subdir")

	ents, err := s.ListActive()
	if err != nil {
		t.Fatalf("ListActive = %v; a bad file must never fail the listing", err)
	}
	byName := map[string]ActiveEntry{}
	for _, e := range ents {
		name := filepath.Base(e.Path)
		if filepath.Dir(e.Path) != s.ActiveDir() {
			t.Errorf("entry path %s is not in the active directory", e.Path)
		}
		if _, dup := byName[name]; dup {
			t.Errorf("%s listed twice", name)
		}
		byName[name] = e
		if IsTempName(name) {
			t.Errorf("dot-file %s listed", name)
		}
	}
	if want := 8 + len(foreign); len(ents) != want {
		t.Errorf("ListActive returned %d entries, want %d", len(ents), want)
	}

	for _, id := range []RunID{live1, live2, terminal} {
		e, ok := byName[string(id)+".json"]
		if !ok {
			t.Fatalf("%s not listed", id)
		}
		if e.Err != nil || e.Rec == nil || e.Finished || e.ID != id || e.Rec.RunID != id {
			t.Errorf("entry %s = %+v, want a readable record", id, e)
		}
	}
	if e := byName[string(live2)+".json"]; e.Rec != nil && e.Rec.State != Running {
		t.Errorf("live2 state = %s", e.Rec.State)
	}

	for _, id := range []RunID{corrupt, empty, mismatched} {
		e, ok := byName[string(id)+".json"]
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
	if e := byName[string(mismatched)+".json"]; e.Err != nil && !strings.Contains(e.Err.Error(), string(live1)) {
		t.Errorf("mismatch error %q does not say what the record claims", e.Err)
	}

	for _, id := range []RunID{finished, finishedCorrupt} {
		e, ok := byName[string(id)+".json"]
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
}

func TestListActiveAfterRemoveActive(t *testing.T) {
	s := newStore(t)
	id := idAt(time.Now(), 1)
	if err := s.WriteActive(testRecord(id, Running)); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteDone(testRecord(id, Stopped)); err != nil {
		t.Fatal(err)
	}
	ents, _ := s.ListActive()
	if len(ents) != 1 || !ents[0].Finished {
		t.Fatalf("between WriteDone and RemoveActive: %+v, want one Finished entry", ents)
	}
	if err := s.RemoveActive(id); err != nil {
		t.Fatal(err)
	}
	ents, err := s.ListActive()
	if err != nil || len(ents) != 0 {
		t.Fatalf("after RemoveActive: %+v, %v", ents, err)
	}
}

func TestReadRun(t *testing.T) {
	s := newStore(t)
	id := idAt(time.Date(2024, 2, 3, 4, 5, 6, 7, time.UTC), 9)

	_, err := s.ReadRun(id)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), string(id)) {
		t.Fatalf("ReadRun(unknown) = %v, want ErrNotExist naming the run", err)
	}

	active := testRecord(id, Running)
	if err := s.WriteActive(active); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadRun(id)
	if err != nil || got.State != Running {
		t.Fatalf("ReadRun(active only) = %+v, %v", got, err)
	}

	done := testRecord(id, Failed)
	done.Reason = "exit status 2"
	if err := s.WriteDone(done); err != nil {
		t.Fatal(err)
	}
	// Both exist: the finished record wins.
	got, err = s.ReadRun(id)
	if err != nil || got.State != Failed || got.Reason != "exit status 2" {
		t.Fatalf("ReadRun(active and done) = %+v, %v; want the done record", got, err)
	}

	if err := s.RemoveActive(id); err != nil {
		t.Fatal(err)
	}
	got, err = s.ReadRun(id)
	if err != nil || got.State != Failed {
		t.Fatalf("ReadRun(done only) = %+v, %v", got, err)
	}
}

func TestReadRunCorruptDoneIsAnError(t *testing.T) {
	// A corrupt finished record is reported, not papered over with the
	// stale active one (which would show a finished run as running).
	s := newStore(t)
	id := idAt(time.Now(), 3)
	if err := s.WriteActive(testRecord(id, Running)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.DoneShardDir(id), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, s.DonePath(id), "{trunc")
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
	writeFile(t, s.ActivePath(id), "")
	_, err := s.ReadRun(id)
	if err == nil || errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), s.ActivePath(id)) {
		t.Fatalf("ReadRun(empty active) = %v, want a decode error naming the file", err)
	}
}

// finishedFixture writes finished runs over several days, out of order,
// and returns their ids newest first.
func finishedFixture(t *testing.T, s Store) []RunID {
	t.Helper()
	days := []time.Time{
		time.Date(2023, 12, 31, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 10, 0, 0, 0, 0, time.UTC), // "2024-01-10" sorts after "2024-01-09"
		time.Date(2024, 1, 9, 0, 0, 0, 0, time.UTC),
	}
	var ids []RunID
	n := 0
	for _, d := range days {
		for _, off := range []time.Duration{23*time.Hour + 59*time.Minute, time.Second, 9 * time.Hour, 10 * time.Hour} {
			n++
			id := idAt(d.Add(off), 1000-n) // random part deliberately not in time order
			rec := testRecord(id, Succeeded)
			if n%2 == 0 {
				rec.Task = "even"
			}
			if err := s.WriteDone(rec); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids
}

func recIDs(recs []*Record) []RunID {
	var out []RunID
	for _, r := range recs {
		out = append(out, r.RunID)
	}
	return out
}

func TestRecentFinishedNewestFirstAcrossDays(t *testing.T) {
	s := newStore(t)
	want := finishedFixture(t, s)
	// Distractions that are not records.
	writeFile(t, filepath.Join(s.DoneDir(), "README"), "not a day")
	if err := os.Mkdir(filepath.Join(s.DoneDir(), ".9999-12-31"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(s.DoneDir(), ".9999-12-31", string(idAt(time.Now(), 1))+".json"), "{}")
	newestDay := s.DoneShardDir(want[0])
	writeFile(t, filepath.Join(newestDay, "."+string(want[0])+".json987654"), "{torn")
	writeFile(t, filepath.Join(newestDay, "notes.txt"), "hello")

	for _, n := range []int{1, 3, 4, 5, 9, len(want), len(want) + 10} {
		recs, bad, err := s.RecentFinished(n, nil)
		if err != nil || len(bad) != 0 {
			t.Fatalf("RecentFinished(%d) err %v bad %v", n, err, bad)
		}
		wantN := want[:min(n, len(want))]
		if got := recIDs(recs); !slices.Equal(got, wantN) {
			t.Errorf("RecentFinished(%d) =\n%q\nwant\n%q", n, got, wantN)
		}
	}
	recs, bad, err := s.RecentFinished(0, nil)
	if err != nil || len(recs) != 0 || len(bad) != 0 {
		t.Errorf("RecentFinished(0) = %v, %v, %v", recs, bad, err)
	}
}

func TestRecentFinishedFilter(t *testing.T) {
	s := newStore(t)
	all := finishedFixture(t, s)
	var even []RunID
	for _, id := range all {
		rec, err := s.ReadRun(id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Task == "even" {
			even = append(even, id)
		}
	}
	keep := func(r *Record) bool { return r.Task == "even" }
	for _, n := range []int{1, 3, len(even), len(even) + 1} {
		recs, bad, err := s.RecentFinished(n, keep)
		if err != nil || len(bad) != 0 {
			t.Fatalf("err %v bad %v", err, bad)
		}
		if got, want := recIDs(recs), even[:min(n, len(even))]; !slices.Equal(got, want) {
			t.Errorf("RecentFinished(%d, even) =\n%q\nwant\n%q", n, got, want)
		}
	}
	recs, _, _ := s.RecentFinished(10, func(*Record) bool { return false })
	if len(recs) != 0 {
		t.Errorf("keep=false returned %d records", len(recs))
	}
}

func TestRecentFinishedReportsBadRecords(t *testing.T) {
	s := newStore(t)
	ids := finishedFixture(t, s)
	// Corrupt the second newest and the fourth newest.
	writeFile(t, s.DonePath(ids[1]), "")
	writeFile(t, s.DonePath(ids[3]), `{"version":2}`)

	recs, bad, err := s.RecentFinished(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := recIDs(recs), []RunID{ids[0], ids[2], ids[4]}; !slices.Equal(got, want) {
		t.Errorf("RecentFinished(3) = %q, want %q (bad ones skipped, not counted)", got, want)
	}
	if len(bad) != 2 {
		t.Fatalf("bad = %v, want 2 errors", bad)
	}
	for i, idx := range []int{1, 3} {
		if !strings.Contains(bad[i].Error(), s.DonePath(ids[idx])) {
			t.Errorf("bad[%d] = %q, want it to name %s", i, bad[i], s.DonePath(ids[idx]))
		}
	}
}

func TestRecentFinishedReadsOnlyWhatItNeeds(t *testing.T) {
	// Its cost follows how far back it must look: a corrupt record in an
	// older day is never read when the newest day has enough.
	s := newStore(t)
	ids := finishedFixture(t, s)
	oldest := ids[len(ids)-1]
	writeFile(t, s.DonePath(oldest), "corrupt")
	recs, bad, err := s.RecentFinished(2, nil)
	if err != nil || len(bad) != 0 || len(recs) != 2 {
		t.Fatalf("RecentFinished(2) = %d recs, bad %v, err %v; the oldest day should not be read", len(recs), bad, err)
	}
	_, bad, _ = s.RecentFinished(len(ids), nil)
	if len(bad) != 1 {
		t.Errorf("reading everything: bad = %v, want the one corrupt record", bad)
	}
}

func TestRecentFinishedNoDoneDir(t *testing.T) {
	recs, bad, err := New(filepath.Join(t.TempDir(), "none")).RecentFinished(5, nil)
	if recs != nil || bad != nil || err != nil {
		t.Fatalf("RecentFinished(no root) = %v, %v, %v", recs, bad, err)
	}
}
