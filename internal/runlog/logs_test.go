package runlog_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runlog"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/storetest"
)

func TestLogs(t *testing.T) {
	s := newStore(t)
	if s.Logs().HasLog(storetest.ID) {
		t.Error("HasLog before CreateLog")
	}
	if _, err := s.Logs().OpenLog(storetest.ID); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), string(storetest.ID)) {
		t.Errorf("OpenLog(none) = %v, want ErrNotExist naming the run", err)
	}
	f, warning, err := s.Logs().CreateLog(storetest.ID)
	if err != nil || warning != "" {
		t.Fatalf("CreateLog = %v, warning %q", err, warning)
	}
	if _, err := f.WriteString("one\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if !s.Logs().HasLog(storetest.ID) {
		t.Error("HasLog = false")
	}
	if s.Logs().LogPath(storetest.ID) != osPath(s, "logs", runlog.LogName(storetest.ID)) {
		t.Errorf("LogPath = %q", s.Logs().LogPath(storetest.ID))
	}
	storetest.AssertMode(t, s.Logs().LogPath(storetest.ID), runstore.FilePerm)
	f, err = s.Logs().OpenLog(storetest.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "one\n" {
		t.Errorf("log = %q", b)
	}

	// A log is created exclusively: whatever is at its name already
	// (planted before the run started: its id is readable in queue/) is
	// moved into quarantine/ with a note, never written to or through.
	outside := filepath.Join(t.TempDir(), "victim")
	storetest.WriteString(t, outside, "precious")
	linked, fifo, hard, dir := storetest.IDAt(time.Now(), 1), storetest.IDAt(time.Now(), 2), storetest.IDAt(time.Now(), 3), storetest.IDAt(time.Now(), 4)
	if err := os.Symlink(outside, s.Logs().LogPath(linked)); err != nil {
		t.Fatal(err)
	}
	storetest.Mkfifo(t, s.Logs().LogPath(fifo))
	if err := os.Link(outside, s.Logs().LogPath(hard)); err != nil {
		t.Fatal(err)
	}
	storetest.MkdirAll(t, s.Logs().LogPath(dir))
	for _, id := range []record.RunID{linked, fifo, hard, dir} {
		if s.Logs().HasLog(id) && id != hard {
			t.Errorf("HasLog(%s) = true for a non-regular file", id)
		}
		g, err := storetest.ReturnsAtOnce(t, "OpenLog", func() (*os.File, error) { return s.Logs().OpenLog(id) })
		if err == nil {
			g.Close()
			t.Errorf("OpenLog(%s) opened a planted file", id)
		}
	}
	for _, id := range []record.RunID{storetest.ID, linked, fifo, hard, dir} {
		type created struct {
			f       *os.File
			warning string
		}
		c, err := storetest.ReturnsAtOnce(t, "CreateLog", func() (created, error) {
			f, w, err := s.Logs().CreateLog(id)
			return created{f, w}, err
		})
		if err != nil {
			t.Errorf("CreateLog(%s) over a planted file = %v", id, err)
			continue
		}
		if _, err := c.f.WriteString("fresh\n"); err != nil {
			t.Fatal(err)
		}
		c.f.Close()
		if !strings.Contains(c.warning, s.Logs().LogPath(id)+" existed before the run started") ||
			!strings.Contains(c.warning, "moved it to "+osPath(s, "quarantine", runlog.LogName(id))) {
			t.Errorf("CreateLog(%s) warning = %q", id, c.warning)
		}
		if got := storetest.ReadString(t, s.Logs().LogPath(id)); got != "fresh\n" {
			t.Errorf("log of %s = %q, want a fresh log", id, got)
		}
		if _, err := os.Lstat(osPath(s, "quarantine", runlog.LogName(id))); err != nil {
			t.Errorf("the planted log of %s is not in quarantine: %v", id, err)
		}
		note := storetest.ReadString(t, osPath(s, "quarantine", runlog.LogName(id)+".why"))
		if !strings.Contains(note, "by crew start") || !strings.Contains(note, "existed before run "+string(id)+" started") {
			t.Errorf("quarantine note = %q", note)
		}
	}
	if storetest.ReadString(t, outside) != "precious" {
		t.Error("a log was written through a link")
	}
}
