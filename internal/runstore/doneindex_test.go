package runstore

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

// backdate sets a shard's modification time an hour back, as a shard
// nobody touched for an hour has.
func backdate(t *testing.T, s *Store, shard string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(s.osPath(doneDir, shard), old, old); err != nil {
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
		writeDoneFast(t, s, idAt(base.Add(time.Duration(i)*time.Minute), i))
	}
	shard := idAt(base, 0).Shard()

	// Not settled (just written): counted, not remembered.
	x := s.OpenDoneIndex(time.Now)
	if n, err := x.Count(shard); err != nil || n != 5 {
		t.Fatalf("Count = %d, %v", n, err)
	}
	x.Save()
	x.Close()
	assertMissing(t, s.osPath("runs", indexName))

	// Settled: remembered, with sizes.
	backdate(t, s, shard)
	x = s.OpenDoneIndex(time.Now)
	if n, _ := x.Count(shard); n != 5 {
		t.Fatalf("Count = %d", n)
	}
	x.Save()
	x.Close()
	assertExists(t, s.osPath("runs", indexName))
	x = s.OpenDoneIndex(time.Now)
	e, ok := x.cached(shard)
	x.Close()
	if !ok || e.Runs != 5 || e.LogBytes < 0 || e.RecordBytes == 0 {
		t.Fatalf("entry %+v, %v; want 5 runs, measured", e, ok)
	}

	// A record removed behind its back (by hand: no crew involved).
	if err := os.Remove(s.DonePath(idAt(base, 0))); err != nil {
		t.Fatal(err)
	}
	x = s.OpenDoneIndex(time.Now)
	if n, _ := x.Count(shard); n != 4 {
		t.Errorf("after a removal Count = %d, want 4", n)
	}
	x.Close()
	// A record added.
	writeDoneFast(t, s, idAt(base.Add(30*time.Minute), 9))
	writeDoneFast(t, s, idAt(base.Add(31*time.Minute), 10))
	x = s.OpenDoneIndex(time.Now)
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
	x = s.OpenDoneIndex(time.Now)
	x.Count(shard)
	x.Save()
	remembered := x.entries[shard].mtime
	x.Close()
	if remembered == 0 {
		t.Fatal("the settled shard was not remembered")
	}
	if err := os.Rename(s.osPath(doneDir, shard), s.osPath(doneDir, "moved")); err != nil {
		t.Fatal(err)
	}
	mkdirAll(t, s.osPath(doneDir, shard))
	writeDoneFast(t, s, idAt(base, 77))
	same := time.Unix(0, remembered)
	if err := os.Chtimes(s.osPath(doneDir, shard), same, same); err != nil {
		t.Fatal(err)
	}
	x = s.OpenDoneIndex(time.Now)
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
			return os.WriteFile(p, []byte(indexHeader+"2024-01-02T03 1 2 999 0 0 0\n"), 0o600)
		},
		"short lines": func(p string) error { return os.WriteFile(p, []byte(indexHeader+"2024-01-02T03 1\n\n"), 0o600) },
		"symlink":     func(p string) error { return os.Symlink("/etc/passwd", p) },
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			for i := range 3 {
				writeDoneFast(t, s, idAt(base.Add(time.Duration(i)*time.Minute), i))
			}
			if err := write(s.osPath("runs", indexName)); err != nil {
				t.Fatal(err)
			}
			x := s.OpenDoneIndex(time.Now)
			defer x.Close()
			if n, err := x.Count(idAt(base, 0).Shard()); err != nil || n != 3 {
				t.Errorf("Count = %d, %v; want 3", n, err)
			}
		})
	}
}

// Size is exact within its budgets, and says so; past them it estimates
// from what it measured, and says so too.
func TestSizeExactAndEstimated(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 1, 2, 3, 0, 0, 0, time.UTC)
	var want int64
	for h := range 3 {
		for i := range 4 {
			id := idAt(base.Add(time.Duration(h)*time.Hour+time.Duration(i)*time.Minute), h*10+i)
			writeDoneFast(t, s, id)
			writeString(t, s.Logs().LogPath(id), "0123456789")
			fi, _ := os.Stat(s.DonePath(id))
			want += fi.Size() + 10
		}
	}
	rec := testRecord(testID, record.Running)
	mustWriteActive(t, s, rec)
	writeString(t, s.Logs().LogPath(testID), "live")
	fi, _ := os.Stat(s.ActivePath(testID))
	want += fi.Size() + 4

	z, err := s.Size()
	if err != nil {
		t.Fatal(err)
	}
	if !z.Exact || z.Bytes != want || z.Records.Files != 13 || z.Logs.Files != 13 || z.Logs.Bytes != 124 {
		t.Errorf("Size = %+v; want %d bytes, 13 records and logs, exact", z, want)
	}
	// No change on disk: status never writes.
	assertMissing(t, s.osPath("runs", indexName))

	// Past the budget of runs to count, the rest is extrapolated.
	entries, _ := os.ReadDir(s.osPath(doneDir))
	if len(entries) != 3 {
		t.Fatalf("%d shards", len(entries))
	}
	// One shard measured, one counted (two of its runs sampled), one
	// extrapolated from the other two.
	z2, err := s.sizeWithin(4, 8, 2)
	if err != nil {
		t.Fatal(err)
	}
	if z2.Exact || z2.Records.Files != 13 || z2.Bytes != z.Bytes {
		t.Errorf("estimated Size = %+v; want 13 records, the same bytes (every run is alike), not exact", z2)
	}
	if !strings.Contains(z2.Method, "1 are known exactly (0 from the done index, 1 measured now), 1 were counted (4 runs, 2 of them measured as a sample) and 1 not even that") {
		t.Errorf("method %q", z2.Method)
	}
	if z2.Method == "" || z2.Method[:10] != "estimated:" {
		t.Errorf("method %q", z2.Method)
	}
}

// A shard with more runs than Size counts is listed only that far: its
// count, and the totals, are then lower bounds, and Size says which shard.
func TestSizeOfACrowdedShardIsALowerBound(t *testing.T) {
	s := newStore(t)
	base := time.Date(2024, 1, 2, 3, 0, 0, 0, time.UTC)
	for i := range 12 {
		writeDoneFast(t, s, idAt(base.Add(time.Duration(i)*time.Second), i))
	}
	older := idAt(base.Add(-time.Hour), 99)
	writeDoneFast(t, s, older)

	z, err := s.sizeWithin(4, 8, 2)
	if err != nil {
		t.Fatal(err)
	}
	if z.Exact || len(z.Crowded) != 1 || z.Crowded[0] != base.Format("2006-01-02T15") {
		t.Fatalf("Size = %+v; want the shard of %s crowded, not exact", z, base)
	}
	// Nine of the twelve listed (the budget and one more, which proves
	// there are more), and the older shard only guessed.
	if z.Records.Files < 9 || z.Records.Files >= 12+1+9 {
		t.Errorf("Size counted %d records; want a lower bound from the 9 listed", z.Records.Files)
	}
	if !strings.Contains(z.Method, "holds more than the 8 runs listed of it, so the figures are lower bounds") {
		t.Errorf("method %q", z.Method)
	}

	// Within the budget the same shard is counted whole and not crowded.
	z, err = s.sizeWithin(4, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(z.Crowded) != 0 || z.Records.Files != 13 {
		t.Errorf("Size = %+v; want 13 records, none crowded", z)
	}
}
