package runstore

// Every write path of the store against what can be planted at its name:
// a symbolic link (to a file outside the root), a hard link (to one), a
// FIFO, a directory. Nothing outside is ever written; a directory in the
// way is moved into quarantine/, anything else is replaced by rename.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

// plants are the things planted at a name crew writes.
func plants(t *testing.T, outside string) map[string]func(path string) {
	return map[string]func(path string){
		"symlink":   func(path string) { mustDo(t, os.Symlink(outside, path)) },
		"hard link": func(path string) { mustDo(t, os.Link(outside, path)) },
		"FIFO":      func(path string) { mkfifo(t, path) },
		"directory": func(path string) { mkdirAll(t, filepath.Join(path, "inside")) },
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWritesReplacePlantedFiles(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "victim")
	writeString(t, outside, "precious")
	id := idAt(time.Date(2024, 3, 4, 5, 6, 7, 0, time.UTC), 7)
	writes := map[string]struct {
		path  func(s *Store) string
		write func(t *testing.T, s *Store)
		check func(t *testing.T, s *Store)
	}{
		"stop request": {
			func(s *Store) string { return s.osPath(ownersDir, stopRequestName(id)) },
			func(t *testing.T, s *Store) {
				mustDo(t, s.WriteStopRequest(id, &record.StopRequest{PID: 42, User: "ops", Signal: "SIGTERM"}))
			},
			func(t *testing.T, s *Store) {
				if r := s.ReadStopRequest(id); r == nil || r.PID != 42 {
					t.Errorf("ReadStopRequest = %+v", r)
				}
			},
		},
		"active record": {
			func(s *Store) string { return s.ActivePath(id) },
			func(t *testing.T, s *Store) {
				l := reserve(t, s, id)
				mustDo(t, l.Update(testRecord(id, record.Running)))
			},
			func(t *testing.T, s *Store) {
				if r, err := s.ReadActive(id); err != nil || r.State != record.Running {
					t.Errorf("ReadActive = %+v, %v", r, err)
				}
			},
		},
		"finished record": {
			func(s *Store) string { mkdirAll(t, s.osPath(shardDir(id))); return s.DonePath(id) },
			func(t *testing.T, s *Store) { mustDo(t, s.writeDone(testRecord(id, record.Succeeded))) },
			func(t *testing.T, s *Store) {
				if r, err := s.ReadDone(id); err != nil || r.State != record.Succeeded {
					t.Errorf("ReadDone = %+v, %v", r, err)
				}
			},
		},
		"config": {
			func(s *Store) string { return s.ConfigPath() },
			func(t *testing.T, s *Store) {
				a := lockAdmission(t, s)
				defer a.Release()
				cfg := record.DefaultConfig()
				cfg.MaximumInProgress = 9
				mustDo(t, a.SaveConfig(cfg))
			},
			func(t *testing.T, s *Store) {
				if cfg, _, err := s.LoadConfig(); err != nil || cfg.MaximumInProgress != 9 {
					t.Errorf("LoadConfig = %+v, %v", cfg, err)
				}
			},
		},
	}
	for wname, w := range writes {
		for pname, plant := range plants(t, outside) {
			t.Run(wname+"/"+pname, func(t *testing.T) {
				s := newStore(t)
				path := w.path(s)
				plant(path)
				w.write(t, s)
				w.check(t, s)
				fi, err := os.Lstat(path)
				if err != nil || !fi.Mode().IsRegular() {
					t.Errorf("%s is %v, %v; want a regular file", path, fi, err)
				}
				if pname == "directory" {
					if _, err := os.Lstat(s.osPath(quarantineDir, filepath.Base(path), "inside")); err != nil {
						t.Errorf("the planted directory is not in quarantine: %v", err)
					}
				}
			})
		}
	}
	if got := readString(t, outside); got != "precious" {
		t.Errorf("a write went through a planted link: %q", got)
	}
}

// A file planted at a run's record name after its reservation (the
// record file removed, something else put there) is never written
// through nor moved among the finished runs: the supervisor's updates go
// into its own file, and its finish writes the final record anew and
// sets the planted thing aside.
func TestFinishOverAFilePlantedAtTheRecordsName(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "victim")
	writeString(t, outside, "precious")
	for pname, plant := range plants(t, outside) {
		t.Run(pname, func(t *testing.T) {
			s := newStore(t)
			l := reserve(t, s, testID)
			mustDo(t, os.Remove(s.ActivePath(testID)))
			plant(s.ActivePath(testID))
			mustDo(t, l.Update(testRecord(testID, record.Running)))
			mustDo(t, l.Finish(finalOf(testRecord(testID, record.Running), record.Succeeded, 0, "")))
			if r, err := s.ReadDone(testID); err != nil || r.State != record.Succeeded {
				t.Fatalf("ReadDone = %+v, %v", r, err)
			}
			if fi, err := os.Lstat(s.DonePath(testID)); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("finished record %v, %v; want a regular file", fi, err)
			}
			assertMissing(t, s.ActivePath(testID))
			if _, err := os.Lstat(s.osPath(quarantineDir, recordName(testID))); err != nil {
				t.Errorf("the planted %s is not in quarantine: %v", pname, err)
			}
		})
	}
	if got := readString(t, outside); got != "precious" {
		t.Errorf("a write went through a planted link: %q", got)
	}
}

// quarantine/ may hold planted things at the very names a quarantine
// picks: the note is written beside them (never through them), and
// nothing already there is overwritten.
func TestQuarantineOverPlantedFiles(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "victim")
	writeString(t, outside, "precious")
	for pname, plant := range plants(t, outside) {
		t.Run(pname, func(t *testing.T) {
			s := newStore(t)
			mkdirAll(t, s.osPath(quarantineDir))
			name := recordName(testID)
			plant(s.osPath(quarantineDir, name))
			plant(s.osPath(quarantineDir, name+".why"))
			writeString(t, s.ActivePath(testID), "garbage")
			dest, err := s.QuarantineActive(name, "not a record", time.Now(), "ci-7")
			if err != nil {
				t.Fatal(err)
			}
			if dest == s.osPath(quarantineDir, name) || readString(t, dest) != "garbage" {
				t.Errorf("quarantined to %s", dest)
			}
			if why := readString(t, dest+".why"); !strings.Contains(why, "not a record") {
				t.Errorf("note = %q", why)
			}
		})
	}
	if got := readString(t, outside); got != "precious" {
		t.Errorf("a quarantine wrote through a planted link: %q", got)
	}
}
