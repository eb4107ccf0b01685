package runstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

func TestStopRequests(t *testing.T) {
	s := newStore(t)
	if r := s.ReadStopRequest(testID); r != nil {
		t.Errorf("ReadStopRequest(none) = %+v", r)
	}
	want := &record.StopRequest{PID: 99, User: "ops", Signal: "SIGTERM", At: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), Killed: true, Grace: "10s"}
	if err := s.WriteStopRequest(testID, want); err != nil {
		t.Fatal(err)
	}
	assertMode(t, s.osPath(ownersDir, stopRequestName(testID)), FilePerm)
	got := s.ReadStopRequest(testID)
	if got == nil || got.FileUID == nil || *got.FileUID != os.Geteuid() {
		t.Fatalf("ReadStopRequest = %+v, want FileUID %d (the file's owner)", got, os.Geteuid())
	}
	named := *want
	named.RunID = testID // the store writes the run's id into its request
	if got.FileUID = nil; *got != named {
		t.Errorf("ReadStopRequest = %+v, want %+v", got, named)
	}
	if err := s.RemoveStopRequest(testID); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveStopRequest(testID); err != nil {
		t.Errorf("RemoveStopRequest twice = %v", err)
	}
	assertOnlyFiles(t, s.osPath(ownersDir))
	// No state root: nothing to remove, nothing created.
	missing := New(filepath.Join(t.TempDir(), "none"))
	if err := missing.RemoveStopRequest(testID); err != nil {
		t.Errorf("RemoveStopRequest(no root) = %v", err)
	}
	if err := missing.WriteStopRequest(testID, want); err == nil || !strings.Contains(err.Error(), string(testID)) {
		t.Errorf("WriteStopRequest(no root) = %v, want an error naming the run", err)
	}
	assertMissing(t, missing.Root())
}

// A stop request only adds who asked to a stopped run's reason: one that
// cannot be read is no request, and reading it never blocks or follows a
// link.
func TestReadStopRequestIgnoresBadFiles(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "stop")
	writeString(t, outside, `{"pid":1,"user":"intruder"}`)
	for name, plant := range map[string]func(path string){
		"corrupt":   func(path string) { writeString(t, path, "{") },
		"oversized": func(path string) { writeString(t, path, `{"pid":1}`+strings.Repeat(" ", 64<<10)) },
		"FIFO":      func(path string) { mkfifo(t, path) },
		"link": func(path string) {
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			plant(s.osPath(ownersDir, stopRequestName(testID)))
			r, _ := returnsAtOnce(t, "ReadStopRequest", func() (*record.StopRequest, error) { return s.ReadStopRequest(testID), nil })
			if r != nil {
				t.Errorf("ReadStopRequest = %+v, want nil", r)
			}
		})
	}
}

// Who asked is a request file's owner; which run it asks to stop is its
// name, which anyone who may write owners/ can change by moving the file.
// A request names its run inside, so one moved onto another run's name
// asks nothing of that run. One written before requests named their run
// is still read.
func TestAStopRequestMovedToAnotherRunIsNone(t *testing.T) {
	s := newStore(t)
	other := idAt(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), 7)
	if err := s.WriteStopRequest(testID, &record.StopRequest{PID: 1, User: "root", Signal: "SIGKILL"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(s.osPath(ownersDir, stopRequestName(testID)), s.osPath(ownersDir, stopRequestName(other))); err != nil {
		t.Fatal(err)
	}
	if r := s.ReadStopRequest(other); r != nil {
		t.Errorf("ReadStopRequest(%s) of %s's request moved to its name = %+v, want none", other, testID, r)
	}
	watch, err := s.WatchStopRequests(other)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	if r := watch.Pending(); r != nil {
		t.Errorf("the supervisor of %s sees %s's request moved to its name as pending: %+v", other, testID, r)
	}
	writeString(t, s.osPath(ownersDir, stopRequestName(other)), `{"pid":1,"user":"ops","signal":"SIGTERM"}`)
	if r := s.ReadStopRequest(other); r == nil || r.User != "ops" {
		t.Errorf("ReadStopRequest of a request that names no run = %+v, want it read", r)
	}
}

func TestRefusals(t *testing.T) {
	s := newStore(t)
	if r := s.LastRefusal("build"); r != nil {
		t.Errorf("LastRefusal(none) = %+v", r)
	}
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, task := range []string{"build", "deploy", "build"} {
		s.AppendRefusal(record.Refusal{At: at.Add(time.Duration(i) * time.Second), Task: task, Reason: "slots full", ExitCode: 75 + i, PID: 100 + i})
	}
	r := s.LastRefusal("build")
	if r == nil || r.PID != 102 || r.ExitCode != 77 || !r.At.Equal(at.Add(2*time.Second)) {
		t.Errorf("LastRefusal(build) = %+v, want the newest", r)
	}
	if r := s.LastRefusal("deploy"); r == nil || r.PID != 101 {
		t.Errorf("LastRefusal(deploy) = %+v", r)
	}
	if r := s.LastRefusal("test"); r != nil {
		t.Errorf("LastRefusal(test) = %+v, want nil", r)
	}
	assertMode(t, s.osPath(refusalsName), FilePerm)

	// Past its limit the log starts over; the previous one is still read.
	writeString(t, s.osPath(refusalsName), readString(t, s.osPath(refusalsName))+strings.Repeat("x", refusalsLogLimit)+"\n")
	s.AppendRefusal(record.Refusal{At: at, Task: "deploy", PID: 200})
	if fi, err := os.Stat(s.osPath(refusalsName)); err != nil || fi.Size() > 1024 {
		t.Errorf("refusals.log after rotation: %v, %v", fi, err)
	}
	if r := s.LastRefusal("build"); r == nil || r.PID != 102 {
		t.Errorf("LastRefusal(build) after rotation = %+v, want it from the previous log", r)
	}
	if r := s.LastRefusal("deploy"); r == nil || r.PID != 200 {
		t.Errorf("LastRefusal(deploy) after rotation = %+v", r)
	}

	// Refusals are diagnostics: a link (symbolic or hard) at the log's name
	// is neither written through nor read, and never fails the caller: it
	// is moved aside into quarantine/ and a fresh log is started.
	for name, link := range map[string]func(string, string) error{"symlink": os.Symlink, "hard link": os.Link} {
		s2 := newStore(t)
		outside := filepath.Join(t.TempDir(), "victim")
		writeString(t, outside, `{"task":"build","pid":666}`+"\n")
		if err := link(outside, s2.osPath(refusalsName)); err != nil {
			t.Fatal(err)
		}
		if r := s2.LastRefusal("build"); r != nil {
			t.Errorf("%s: LastRefusal read through the link: %+v", name, r)
		}
		s2.AppendRefusal(record.Refusal{Task: "build", PID: 1})
		if r := s2.LastRefusal("build"); r == nil || r.PID != 1 {
			t.Errorf("%s: LastRefusal after the link was moved aside = %+v", name, r)
		}
		if got := readString(t, outside); got != `{"task":"build","pid":666}`+"\n" {
			t.Errorf("%s: refusal written through a link: %q", name, got)
		}
		if _, err := os.Lstat(s2.osPath(quarantineDir, refusalsName)); err != nil {
			t.Errorf("%s: the planted log is not in quarantine: %v", name, err)
		}
	}
	// No state root: nothing happens, nothing is created.
	missing := New(filepath.Join(t.TempDir(), "none"))
	missing.AppendRefusal(record.Refusal{Task: "build"})
	assertMissing(t, missing.Root())
}

func TestQuarantineActive(t *testing.T) {
	s := newStore(t)
	writeString(t, s.ActivePath(testID), "garbage")
	now := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	dest, err := s.QuarantineActive(recordName(testID), "not a JSON run record", now, "ci-7")
	if err != nil {
		t.Fatal(err)
	}
	if dest != s.osPath(quarantineDir, recordName(testID)) {
		t.Errorf("QuarantineActive = %q", dest)
	}
	if s.ActiveFileExists(recordName(testID)) {
		t.Error("the file is still in the active set")
	}
	if got := readString(t, dest); got != "garbage" {
		t.Errorf("quarantined content = %q", got)
	}
	why := readString(t, dest+".why")
	for _, want := range []string{"not a JSON run record", s.ActivePath(testID), "ci-7", now.Format(time.RFC3339)} {
		if !strings.Contains(why, want) {
			t.Errorf("note %q lacks %q", why, want)
		}
	}
	// The same name again: kept apart, never overwritten.
	writeString(t, s.ActivePath(testID), "garbage 2")
	dest2, err := s.QuarantineActive(recordName(testID), "again", now, "ci-7")
	if err != nil {
		t.Fatal(err)
	}
	if dest2 == dest || readString(t, dest) != "garbage" || readString(t, dest2) != "garbage 2" {
		t.Errorf("second quarantine: %s (first %s)", dest2, dest)
	}
	assertOnlyFiles(t, s.osPath(activeDir))
}
