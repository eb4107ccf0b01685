package runstore

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

func TestIndexLineRoundTrip(t *testing.T) {
	e := activeEntryLine{ID: testID, Task: "deploy \"prod\"\n evil 7", Pool: "pool with spaces", CreatedAt: time.Unix(1700000000, 123456789).UTC(),
		PID: 4711, Locks: record.LockIDs{Owner: record.FileID{Dev: 2049, Ino: 12345}, Supervisor: record.FileID{Dev: 2049, Ino: 12346}}}
	line := string(e.line())
	if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
		t.Fatalf("line %q: a task name must never add a line", line)
	}
	got, ok := parseIndexLine(strings.TrimSuffix(line, "\n"))
	if !ok || got != e {
		t.Errorf("parseIndexLine(%q) = %+v, %v; want %+v", line, got, ok, e)
	}
	for _, bad := range []string{"", "garbage", line[:len(line)/2], strings.Replace(line, string(testID), "r-x", 1),
		strings.TrimSuffix(line, "\n") + " extra"} {
		if _, ok := parseIndexLine(strings.TrimSuffix(bad, "\n")); ok {
			t.Errorf("parseIndexLine(%q) accepted a malformed line", bad)
		}
	}
}

// reserveMany reserves n runs (held by this process) and returns their ids.
func reserveMany(t *testing.T, s *Store, n int) []record.RunID {
	t.Helper()
	var ids []record.RunID
	for i := range n {
		id := idAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), i+1)
		reserve(t, s, id)
		ids = append(ids, id)
	}
	return ids
}

// With more than kernelTableAbove living runs, a fast scan counts them from
// the active index (no record read), a slow one from their records, and
// both agree on every run and its liveness.
func TestScanActiveFastUsesTheIndex(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel's lock table is Linux's /proc/locks")
	}
	s := newStore(t)
	ids := reserveMany(t, s, kernelTableAbove+4)
	fast, err := s.ScanActive(true)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := s.ScanActive(false)
	if err != nil {
		t.Fatal(err)
	}
	if len(fast) != len(ids) || len(slow) != len(ids) {
		t.Fatalf("scans found %d and %d runs, want %d", len(fast), len(slow), len(ids))
	}
	indexed := 0
	bySlow := map[record.RunID]ActiveRun{}
	for _, r := range slow {
		if r.Indexed {
			t.Errorf("slow scan took run %s from the index", r.ID)
		}
		bySlow[r.ID] = r
	}
	for _, r := range fast {
		w := bySlow[r.ID]
		if r.Indexed {
			indexed++
		}
		if r.Owner.Owner != record.Alive || w.Owner.Owner != record.Alive {
			t.Errorf("run %s: fast owner %v, slow %v; want alive", r.ID, r.Owner.Owner, w.Owner.Owner)
		}
		if r.Rec == nil || r.Rec.Task != w.Rec.Task || r.Rec.Pool != w.Rec.Pool || !r.Rec.CreatedAt.Equal(w.Rec.CreatedAt) || !r.Rec.State.Active() {
			t.Errorf("run %s: fast record %+v does not agree with %+v", r.ID, r.Rec, w.Rec)
		}
	}
	if indexed != len(ids) {
		t.Errorf("fast scan took %d of %d living runs from the index", indexed, len(ids))
	}
}

// The index is trusted for nothing the kernel does not confirm: a run
// whose locks are free is read from its record (and found dead), and a
// torn or foreign index is read around.
func TestScanActiveFastTrustsTheIndexForLivingRunsOnly(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel's lock table is Linux's /proc/locks")
	}
	s := newStore(t)
	reserveMany(t, s, kernelTableAbove+2)
	dead := idAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), 99)
	reserve(t, s, dead).Release()
	// Garbage in the index, and a line that lies about a living run's task.
	f, err := os.OpenFile(s.osPath(indexDir, activeIndexName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "torn line without its end\n\x00\x01garbage\n")
	f.Close()
	runs, err := s.ScanActive(true)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.ID == dead {
			if r.Indexed || r.Owner.Owner != record.Dead || r.Rec == nil || r.Rec.State != record.Provisioning {
				t.Errorf("dead run %s: %+v; want it read from its record and dead", dead, r)
			}
		} else if !r.Indexed {
			t.Errorf("living run %s not taken from the index despite the garbage beside it", r.ID)
		}
	}
}

// Admission rewrites an index that has grown far past the active set.
func TestAdmissionCompactsTheIndex(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the index is read with the kernel's lock table")
	}
	s := newStore(t)
	live := reserveMany(t, s, kernelTableAbove+1)
	var stale strings.Builder
	for i := range compactAbove + 10 {
		e := activeEntryLine{ID: idAt(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), i+1), Task: "gone", CreatedAt: time.Now()}
		stale.Write(e.line())
	}
	f, err := os.OpenFile(s.osPath(indexDir, activeIndexName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(stale.String())
	f.Close()
	a := lockAdmission(t, s)
	if _, err := a.ScanActive(); err != nil {
		t.Fatal(err)
	}
	a.Release()
	index, lines := s.readIndex()
	if lines != len(live) || len(index) != len(live) {
		t.Errorf("index after compaction: %d lines, %d entries; want %d", lines, len(index), len(live))
	}
	for _, id := range live {
		if index[id] == nil {
			t.Errorf("compaction dropped living run %s", id)
		}
	}
}
