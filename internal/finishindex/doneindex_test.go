package finishindex_test

import (
	"os"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/finishindex"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/storetest"
)

// backdate sets a shard's modification time an hour back, as a shard
// nobody touched for an hour has.
func backdate(t *testing.T, s *runstore.Store, shard string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(osPath(s, "runs/done", shard), old, old); err != nil {
		t.Fatal(err)
	}
}

// The index remembers settled shards, and never answers for a shard
// changed since it counted it, whoever changed it, or for a shard that
// was not settled when counted.
func TestDoneIndexNeverTrustsAChangedShard(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 1, 2, 3, 0, 0, 0, time.UTC)
	for i := range 5 {
		writeDoneFast(t, s, storetest.IDAt(base.Add(time.Duration(i)*time.Minute), i))
	}
	shard := storetest.IDAt(base, 0).Shard()

	// Not settled (just written): counted, not remembered.
	x := s.FinishIndex().OpenDoneIndex(time.Now)
	if n, err := x.Count(shard); err != nil || n != 5 {
		t.Fatalf("Count = %d, %v", n, err)
	}
	x.Save()
	x.Close()
	storetest.AssertMissing(t, osPath(s, "runs", finishindex.IndexName))

	// Settled: remembered, with sizes.
	backdate(t, s, shard)
	x = s.FinishIndex().OpenDoneIndex(time.Now)
	if n, _ := x.Count(shard); n != 5 {
		t.Fatalf("Count = %d", n)
	}
	x.Save()
	x.Close()
	storetest.AssertExists(t, osPath(s, "runs", finishindex.IndexName))
	x = s.FinishIndex().OpenDoneIndex(time.Now)
	e, ok := x.Cached(shard)
	x.Close()
	if !ok || e.Runs != 5 || e.LogBytes < 0 || e.RecordBytes == 0 {
		t.Fatalf("entry %+v, %v; want 5 runs, measured", e, ok)
	}

	// A record removed behind its back (by hand: no crew involved).
	if err := os.Remove(s.DonePath(storetest.IDAt(base, 0))); err != nil {
		t.Fatal(err)
	}
	x = s.FinishIndex().OpenDoneIndex(time.Now)
	if n, _ := x.Count(shard); n != 4 {
		t.Errorf("after a removal Count = %d, want 4", n)
	}
	x.Close()
	// A record added.
	writeDoneFast(t, s, storetest.IDAt(base.Add(30*time.Minute), 9))
	writeDoneFast(t, s, storetest.IDAt(base.Add(31*time.Minute), 10))
	x = s.FinishIndex().OpenDoneIndex(time.Now)
	if n, _ := x.Count(shard); n != 6 {
		t.Errorf("after two additions Count = %d, want 6", n)
	}
	st, fresh, _ := x.Stats(shard, 100)
	if st.Runs != 6 || !fresh {
		t.Errorf("Stats = %+v, fresh %v", st, fresh)
	}
	x.Close()

	// A shard replaced by another directory of the same name (a prune
	// removed it, a finish made it again) with the same mtime by chance.
	backdate(t, s, shard)
	x = s.FinishIndex().OpenDoneIndex(time.Now)
	x.Count(shard)
	x.Save()
	remembered := x.Mtime(shard)
	x.Close()
	if remembered == 0 {
		t.Fatal("the settled shard was not remembered")
	}
	if err := os.Rename(osPath(s, "runs/done", shard), osPath(s, "runs/done", "moved")); err != nil {
		t.Fatal(err)
	}
	storetest.MkdirAll(t, osPath(s, "runs/done", shard))
	writeDoneFast(t, s, storetest.IDAt(base, 77))
	same := time.Unix(0, remembered)
	if err := os.Chtimes(osPath(s, "runs/done", shard), same, same); err != nil {
		t.Fatal(err)
	}
	x = s.FinishIndex().OpenDoneIndex(time.Now)
	if n, _ := x.Count(shard); n != 1 {
		t.Errorf("a replaced shard: Count = %d, want 1", n)
	}
	x.Close()
}

// An index that is not one (garbage, a directory, too big, another
// version) is ignored and rebuilt.
func TestDoneIndexIgnoresABadIndex(t *testing.T) {
	base := time.Date(2024, 1, 2, 3, 0, 0, 0, time.UTC)
	for name, write := range map[string]func(path string) error{
		"garbage":   func(p string) error { return os.WriteFile(p, []byte("\x00\x01 not an index"), 0o600) },
		"directory": func(p string) error { return os.Mkdir(p, 0o700) },
		"wrong counts": func(p string) error {
			return os.WriteFile(p, []byte(finishindex.IndexHeader+"2024-01-02T03 1 2 999 0 0 0\n"), 0o600)
		},
		"short lines": func(p string) error {
			return os.WriteFile(p, []byte(finishindex.IndexHeader+"2024-01-02T03 1\n\n"), 0o600)
		},
		"symlink": func(p string) error { return os.Symlink("/etc/passwd", p) },
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			for i := range 3 {
				writeDoneFast(t, s, storetest.IDAt(base.Add(time.Duration(i)*time.Minute), i))
			}
			if err := write(osPath(s, "runs", finishindex.IndexName)); err != nil {
				t.Fatal(err)
			}
			x := s.FinishIndex().OpenDoneIndex(time.Now)
			defer x.Close()
			if n, err := x.Count(storetest.IDAt(base, 0).Shard()); err != nil || n != 3 {
				t.Errorf("Count = %d, %v; want 3", n, err)
			}
		})
	}
}
