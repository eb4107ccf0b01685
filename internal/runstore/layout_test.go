package runstore

// A process opens each directory of the layout once and keeps it (layout);
// every later use must still find what opening it anew would: a directory
// removed and made again, a link or a writable directory put in its place.

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

// activeIDs lists the active set through s.
func activeIDs(t *testing.T, s *Store) []record.RunID {
	t.Helper()
	ents, err := s.ListActive()
	if err != nil {
		t.Fatal(err)
	}
	var ids []record.RunID
	for _, e := range ents {
		ids = append(ids, e.ID)
	}
	return ids
}

// plantRecord writes a running record of a new run into the active set
// at the directory dir (by its path), behind the store's back.
func plantRecord(t *testing.T, dir string, n int) record.RunID {
	t.Helper()
	id := idAt(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), n)
	b, err := testRecord(id, record.Running).Encode()
	if err != nil {
		t.Fatal(err)
	}
	writeString(t, dir+"/"+string(id)+".json", string(b))
	return id
}

func TestKeptDirectoryFollowsOneMadeAgain(t *testing.T) {
	for _, replaced := range []string{activeDir, "runs"} {
		t.Run(replaced, func(t *testing.T) {
			s := newStore(t)
			if ids := activeIDs(t, s); len(ids) != 0 {
				t.Fatalf("a new store lists %v", ids)
			}
			// Someone moves the directory away and makes it again: the
			// handle kept from the first use now names an orphan.
			if err := os.Rename(s.osPath(replaced), s.osPath(replaced+".old")); err != nil {
				t.Fatal(err)
			}
			mkdirAll(t, s.osPath(activeDir))
			if err := os.Chmod(s.osPath(activeDir), DirPerm); err != nil {
				t.Fatal(err)
			}
			if replaced == "runs" {
				_ = os.Chmod(s.osPath("runs"), DirPerm)
			}
			id := plantRecord(t, s.osPath(activeDir), 1)
			ids := activeIDs(t, s)
			if len(ids) != 1 || ids[0] != id {
				t.Fatalf("after %s was made again with run %s in it, the store lists %v: it read the directory it kept, not the one at the name", replaced, id, ids)
			}
		})
	}
}

func TestKeptDirectoryRefusesALinkPutInItsPlace(t *testing.T) {
	s := newStore(t)
	activeIDs(t, s)
	target, _ := outsideActive(t)
	if err := os.RemoveAll(s.osPath(activeDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, s.osPath(activeDir)); err != nil {
		t.Fatal(err)
	}
	_, err := s.ListActive()
	assertRefusedLink(t, "ListActive after runs/active became a link", err, s.osPath(activeDir))
}

func TestKeptDirectoryRefusesItOnceOthersCanWriteIt(t *testing.T) {
	s := newStore(t)
	activeIDs(t, s)
	if err := os.Chmod(s.osPath(activeDir), 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := s.ListActive()
	if err == nil || !strings.Contains(err.Error(), "writable by every user") {
		t.Fatalf("ListActive after chmod 777 of runs/active = %v, want the refusal of a directory every user can write", err)
	}
}

// A shard of runs/done is opened from the kept runs/done (dir): it must
// still be the shard at the name, through a runs/done made again, and
// never one reached through a link put in runs/done's place.
func TestShardOpensThroughTheKeptDoneDirectory(t *testing.T) {
	const shard = "2026-12-02T10"
	marker := func(t *testing.T, s *Store) string {
		t.Helper()
		d, err := s.dir(doneDir + "/" + shard)
		if err != nil {
			t.Fatalf("open shard %s: %v", shard, err)
		}
		defer d.Close()
		b, err := d.ReadFile("marker")
		if err != nil {
			t.Fatalf("read the marker of shard %s: %v", shard, err)
		}
		return string(b)
	}
	makeShard := func(t *testing.T, done, mark string) {
		t.Helper()
		mkdirAll(t, done+"/"+shard)
		for _, p := range []string{done, done + "/" + shard} {
			if err := os.Chmod(p, DirPerm); err != nil {
				t.Fatal(err)
			}
		}
		writeString(t, done+"/"+shard+"/marker", mark)
	}

	t.Run("made again", func(t *testing.T) {
		s := newStore(t)
		makeShard(t, s.osPath(doneDir), "first")
		if got := marker(t, s); got != "first" {
			t.Fatalf("shard read %q, want first", got)
		}
		if err := os.Rename(s.osPath(doneDir), s.osPath(doneDir+".old")); err != nil {
			t.Fatal(err)
		}
		makeShard(t, s.osPath(doneDir), "second")
		if got := marker(t, s); got != "second" {
			t.Fatalf("after runs/done was made again, the shard read %q, want second: it was opened from the directory kept, not the one at the name", got)
		}
	})
	t.Run("a link in its place", func(t *testing.T) {
		s := newStore(t)
		makeShard(t, s.osPath(doneDir), "first")
		marker(t, s)
		elsewhere := t.TempDir() + "/done"
		makeShard(t, elsewhere, "elsewhere")
		if err := os.RemoveAll(s.osPath(doneDir)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, s.osPath(doneDir)); err != nil {
			t.Fatal(err)
		}
		d, err := s.dir(doneDir + "/" + shard)
		if err == nil {
			d.Close()
		}
		assertRefusedLink(t, "opening a shard after runs/done became a link", err, s.osPath(doneDir))
	})
}
