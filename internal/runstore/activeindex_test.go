package runstore

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/backend"
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
	// Names that take the fast way through unquotePrefix (no backslash
	// once quoted) and names that do not.
	for _, name := range []string{"", "plain", "with space", "日本語 ✓", "a\tb", `back\slash`, `"quoted"`, `\"`, "\x00\x7f", "bad \xff utf-8", "é\u2028"} {
		e2 := e
		e2.Task, e2.Pool = name, name+"-pool"
		line := string(e2.line())
		if got, ok := parseIndexLine(strings.TrimSuffix(line, "\n")); !ok || got != e2 {
			t.Errorf("parseIndexLine(%q) = %+v, %v; want %+v", line, got, ok, e2)
		}
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
	bySlow := map[record.RunID]backend.ActiveRun{}
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

// unquotePrefixStrconv is what unquotePrefix did before it had a fast way.
func unquotePrefixStrconv(s string) (string, string, error) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", err
	}
	u, err := strconv.Unquote(q)
	return u, s[len(q):], err
}

var unquoteCases = []string{
	`"plain" "pool"`, `"" ""`, `""`, `"`, ``, `x"a"`, `"unterminated`, `"a\"b" rest`, `"a\\" rest`, `"a\\"b"`,
	`"日本語" "✓"`, "\"raw\nnewline\" x", "\"raw\ttab\" x", "\"bad\xffutf8\" x", "\"cut \xe6\x97\" x",
	`"\x41\u00e9\U0001F600" x`, `"\q" x`, "`raw` x", `'a' x`, `"a"b`, `"a" "b`,
}

// The fast way agrees with strconv on what it takes and what it leaves,
// including raw control bytes and invalid UTF-8 (which strconv's slow way
// replaces with U+FFFD, so the fast way must not take it).
func TestUnquotePrefixAgreesWithStrconv(t *testing.T) {
	for _, s := range unquoteCases {
		checkUnquotePrefix(t, s)
	}
}

func FuzzUnquotePrefix(f *testing.F) {
	for _, s := range unquoteCases {
		f.Add(s)
	}
	f.Fuzz(checkUnquotePrefix)
}

func checkUnquotePrefix(t *testing.T, s string) {
	t.Helper()
	u, rest, err := unquotePrefix(s)
	wu, wrest, werr := unquotePrefixStrconv(s)
	if u != wu || rest != wrest || (err == nil) != (werr == nil) {
		t.Errorf("unquotePrefix(%q) = %q, %q, %v; strconv says %q, %q, %v", s, u, rest, err, wu, wrest, werr)
	}
}

// readIndexSplit is how readIndex read the index before it presized:
// the same entries and the same line count.
func readIndexSplit(data string) (map[record.RunID]activeEntryLine, int) {
	out := map[record.RunID]activeEntryLine{}
	lines := 0
	for line := range strings.SplitSeq(data, "\n") {
		if line == "" {
			continue
		}
		lines++
		if e, ok := parseIndexLine(line); ok {
			out[e.ID] = e
		}
	}
	return out, lines
}

// readIndex skips what it cannot parse (blank, foreign, half-written and
// torn lines) and counts every non-blank line; a run indexed twice is the
// later line.
func TestReadIndexSkipsMalformedLines(t *testing.T) {
	entry := func(n int, task string) string {
		e := activeEntryLine{ID: idAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), n), Task: task, Pool: "p", CreatedAt: time.Unix(1700000000, int64(n)).UTC(),
			PID: 100 + n, Locks: record.LockIDs{Owner: record.FileID{Dev: 1, Ino: uint64(n)}, Supervisor: record.FileID{Dev: 1, Ino: uint64(1000 + n)}}}
		return string(e.line())
	}
	whole := entry(4, "torn")
	for _, c := range []struct {
		name, data string
		entries    int
	}{
		{"empty", "", 0},
		{"one", entry(1, "a"), 1},
		{"blank lines", "\n\n" + entry(1, "a") + "\n\n" + entry(2, "b") + "\n", 2},
		{"garbage", entry(1, "a") + "garbage\n\x00\x01\n" + entry(2, `esc"aped ✓`), 2},
		{"twice", entry(1, "a") + entry(2, "b") + entry(1, "a again"), 2},
		{"torn last line", entry(1, "a") + whole[:len(whole)/2], 1},
		{"last line without newline", entry(1, "a") + strings.TrimSuffix(whole, "\n"), 2},
		{"half written first line", whole[len(whole)/2:] + entry(1, "a"), 1},
		{"crlf", strings.ReplaceAll(entry(1, "a")+entry(2, "b"), "\n", "\r\n"), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			if err := os.WriteFile(s.osPath(indexDir, activeIndexName), []byte(c.data), 0o644); err != nil {
				t.Fatal(err)
			}
			got, lines := s.readIndex()
			want, wantLines := readIndexSplit(c.data)
			if lines != wantLines || len(got) != len(want) || len(got) != c.entries {
				t.Fatalf("readIndex: %d lines, %d entries; want %d lines, %d entries", lines, len(got), wantLines, c.entries)
			}
			for id, w := range want {
				if g := got[id]; g == nil || *g != w {
					t.Errorf("entry %s = %+v, want %+v", id, g, w)
				}
			}
		})
	}
}

// BenchmarkReadIndex reads an index of 200 runs, what admission reads on
// every pass at 200 active runs.
func BenchmarkReadIndex(b *testing.B) {
	s := newStore(b)
	var data strings.Builder
	for i := range 200 {
		e := activeEntryLine{ID: record.NewRunID(time.Now()), Task: fmt.Sprintf("task-%d", i), Pool: "default", CreatedAt: time.Now(),
			PID: 1000 + i, Locks: record.LockIDs{Owner: record.FileID{Dev: 2049, Ino: uint64(5000 + i)}, Supervisor: record.FileID{Dev: 2049, Ino: uint64(9000 + i)}}}
		data.Write(e.line())
	}
	if err := os.WriteFile(s.osPath(indexDir, activeIndexName), []byte(data.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if index, _ := s.readIndex(); len(index) != 200 {
			b.Fatalf("read %d entries, want 200", len(index))
		}
	}
}
