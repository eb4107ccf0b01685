package runstore

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

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
	assertMissing(t, s.osPath("runs", "done.index")) // the done index (finishindex)

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
