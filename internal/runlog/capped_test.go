package runlog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runlog"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/storetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// markerRE is the test's own reading of the marker, independent of
// parseMarker.
var markerRE = regexp.MustCompile(`^\n?\[crew: (\d+) bytes of output dropped here \(log capped at [^)\n]*\)\]\n`)

// output is n bytes of numbered lines, so that any piece of it says
// where it came from.
func output(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %08d\n", i)
	}
	return b.Bytes()[:n]
}

// writeInChunks gives w the output in uneven chunks, as pipes do.
func writeInChunks(t testing.TB, w io.Writer, out []byte) {
	t.Helper()
	sizes := []int{1, 7, 4096, 65536, 13, 32768, 100_000}
	for i := 0; len(out) > 0; i++ {
		k := min(sizes[i%len(sizes)], len(out))
		n, err := w.Write(out[:k])
		if err != nil || n != k {
			t.Fatalf("Write = %d, %v", n, err)
		}
		out = out[k:]
	}
}

func readAll(t testing.TB, s *runstore.Store, logMax int64) string {
	t.Helper()
	r := s.Logs().NewLogReader(storetest.ID, logMax)
	defer r.Close()
	var b bytes.Buffer
	if _, err := r.Copy(&b); err != nil {
		t.Fatalf("Copy = %v", err)
	}
	return b.String()
}

// checkCapped checks a view of a capped log: the head exactly, the
// marker with the right count, and a suffix of the output.
func checkCapped(t *testing.T, view string, out []byte, logMax int64) {
	t.Helper()
	head := logMax / 2
	if !strings.HasPrefix(view, string(out[:head])) {
		t.Fatalf("the view does not start with the head")
	}
	rest := view[head:]
	m := markerRE.FindStringSubmatch(rest)
	if m == nil {
		t.Fatalf("no marker after the head: %q", rest[:min(len(rest), 120)])
	}
	tail := rest[len(m[0]):]
	var dropped int64
	fmt.Sscan(m[1], &dropped)
	if int64(len(out)) != head+dropped+int64(len(tail)) {
		t.Errorf("head %d + dropped %d + tail %d != output %d", head, dropped, len(tail), len(out))
	}
	if !bytes.HasSuffix(out, []byte(tail)) {
		t.Errorf("the tail is not the end of the output")
	}
	_, piece, pieces := runlog.CapGeometry(logMax)
	if int64(len(tail)) < int64(pieces-1)*piece || int64(len(tail)) > logMax/2 {
		t.Errorf("tail of %d bytes; want %d to %d (cap %d)", len(tail), int64(pieces-1)*piece, logMax/2, logMax)
	}
	if int64(len(view)) > logMax+int64(len(m[0])) {
		t.Errorf("view of %d bytes over the cap %d plus the marker", len(view), logMax)
	}
}

// The geometry never exceeds the cap, keeps a tail of at least a
// quarter of it, and never makes pieces so small that their churn costs.
func TestCapGeometry(t *testing.T) {
	for _, c := range []int64{64 << 10, 100_000, 128 << 10, 200 << 10, 256 << 10, 1 << 20, 1_500_000, 10 << 20, 1 << 30} {
		head, piece, pieces := runlog.CapGeometry(c)
		if head+piece*int64(pieces) > c {
			t.Errorf("cap %d: %d + %d×%d over the cap", c, head, pieces, piece)
		}
		if tail := piece * int64(pieces-1); tail < c/4 || (c >= 256<<10 && tail < 3*c/8) {
			t.Errorf("cap %d: a tail of only %d", c, tail)
		}
		if piece < min(runlog.MinPieceBytes, c/4) {
			t.Errorf("cap %d: pieces of %d", c, piece)
		}
	}
}

func TestCappedLogKeepsHeadMarkerAndTail(t *testing.T) {
	s := newStore(t)
	const logMax = 64 << 10
	out := output(1<<20 + 12345)
	w, _, err := s.Logs().CreateCappedLog(storetest.ID, logMax)
	if err != nil {
		t.Fatal(err)
	}
	writeInChunks(t, w, out)

	// While it writes: a head and at most logCapPieces pieces, never over
	// the cap on disk, and a reader sees the whole view already.
	_, _, keep := runlog.CapGeometry(logMax)
	pieces, err := runlog.ListPieces(s.Logs(), storetest.ID)
	if err != nil || len(pieces) == 0 || len(pieces) > keep {
		t.Fatalf("pieces while writing: %v, %v", pieces, err)
	}
	var disk int64
	for _, p := range pieces {
		disk += p.Size
	}
	fi, _ := os.Stat(s.Logs().LogPath(storetest.ID))
	if disk+fi.Size() > logMax {
		t.Errorf("%d bytes on disk, over the cap %d", disk+fi.Size(), logMax)
	}
	live := readAll(t, s, logMax)
	checkCapped(t, live, out, logMax)

	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.AssertMissing(t, osPath(s, "logs", runlog.TailDirName(storetest.ID)))
	file := storetest.ReadString(t, s.Logs().LogPath(storetest.ID))
	checkCapped(t, file, out, logMax)
	if file != live {
		t.Errorf("the finished file differs from the view while it ran")
	}
	if got := readAll(t, s, logMax); got != file {
		t.Errorf("a reader of the finished log shows something else than the file")
	}
}

func TestCappedLogUnderTheCapIsThePlainOutput(t *testing.T) {
	for _, n := range []int{0, 100, 32 << 10, 32<<10 + 1, 60 << 10} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := newStore(t)
			out := output(n)
			w, _, err := s.Logs().CreateCappedLog(storetest.ID, 64<<10)
			if err != nil {
				t.Fatal(err)
			}
			writeInChunks(t, w, out)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if got := storetest.ReadString(t, s.Logs().LogPath(storetest.ID)); got != string(out) {
				t.Errorf("log of %d bytes differs from the output", len(got))
			}
			if got := readAll(t, s, 64<<10); got != string(out) {
				t.Errorf("view of %d bytes differs from the output", len(got))
			}
		})
	}
}

// The marker is on a line of its own even when the head ends mid-line.
func TestCappedLogMarkerOnItsOwnLine(t *testing.T) {
	s := newStore(t)
	const logMax = 64 << 10
	out := bytes.Repeat([]byte("x"), 200<<10) // no newline at all
	w, _, _ := s.Logs().CreateCappedLog(storetest.ID, logMax)
	writeInChunks(t, w, out)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	file := storetest.ReadString(t, s.Logs().LogPath(storetest.ID))
	if !strings.Contains(file, "x\n[crew: ") || !strings.Contains(file, "(log capped at 64 KiB)]\nx") {
		t.Errorf("marker not on a line of its own: %q", file[32<<10-5:32<<10+80])
	}
	checkCapped(t, file, out, logMax)
}

// A crash at any point of the end (the pieces appended in part, or
// appended but not removed) leaves a log every reader shows whole.
func TestCappedLogCrashWhileComposing(t *testing.T) {
	const logMax = 64 << 10
	out := output(300 << 10)
	// The finished file, for reference.
	ref := newStore(t)
	w, _, _ := ref.Logs().CreateCappedLog(storetest.ID, logMax)
	writeInChunks(t, w, out)
	w.Close()
	want := storetest.ReadString(t, ref.Logs().LogPath(storetest.ID))

	for _, cut := range []int{0, 1, 40, 1000, len(want) - (logMax / 2) - 1, len(want) - logMax/2} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			s := newStore(t)
			w, _, _ := s.Logs().CreateCappedLog(storetest.ID, logMax)
			writeInChunks(t, w, out)
			// Crash: the writer stops here, having appended cut bytes of
			// what comes after the head.
			runlog.Crash(w)
			f, err := os.OpenFile(s.Logs().LogPath(storetest.ID), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(want[logMax/2 : logMax/2+cut])
			f.Close()
			if got := readAll(t, s, logMax); got != want {
				t.Errorf("view after a crash %d bytes into the end differs (%d bytes, want %d)", cut, len(got), len(want))
			}
			// And after some pieces were removed (the end was complete).
			if cut == len(want)-logMax/2 {
				pieces, _ := runlog.ListPieces(s.Logs(), storetest.ID)
				os.Remove(osPath(s, "logs", runlog.TailDirName(storetest.ID), runlog.PieceName(pieces[0].Off)))
				if got := readAll(t, s, logMax); got != want {
					t.Errorf("view with a piece removed after a complete end differs")
				}
			}
		})
	}
}

// A follower reads along while the run writes: what it shows is the head,
// then the output it kept up with, with a marker wherever it fell behind,
// and the end of the output; never a byte twice, never one out of order.
func TestCappedLogFollower(t *testing.T) {
	s := newStore(t)
	const logMax = 64 << 10
	out := output(2 << 20)
	w, _, _ := s.Logs().CreateCappedLog(storetest.ID, logMax)
	r := s.Logs().NewLogReader(storetest.ID, logMax)
	defer r.Close()
	var shown bytes.Buffer
	for i := 0; len(out[w.Written():]) > 0; i++ {
		rest := out[w.Written():]
		k := min(len(rest), []int{10, 5000, 40 << 10, 100 << 10}[i%4])
		if _, err := w.Write(rest[:k]); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := r.Copy(&shown); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.Close()
	if _, err := r.Copy(&shown); err != nil {
		t.Fatal(err)
	}
	view := shown.String()
	if !strings.HasPrefix(view, string(out[:logMax/2])) {
		t.Fatal("the follower did not show the head")
	}
	if !accounts(out, 0, view) {
		t.Errorf("what the follower showed is not the output with markers where it fell behind")
	}
	if !strings.Contains(view, "[crew: ") {
		t.Errorf("the follower never fell behind: the test proves nothing")
	}
}

// accounts reports whether view is out[pos:] with stretches replaced by
// markers that count them. A newline just before a marker may be the
// marker's own (after a stretch that ended mid-line): both readings are
// tried.
func accounts(out []byte, pos int64, view string) bool {
	i := strings.Index(view, "[crew: ")
	if i < 0 {
		return string(out[pos:]) == view
	}
	m := markerRE.FindStringSubmatch(view[i:])
	if m == nil {
		return false
	}
	var dropped int64
	fmt.Sscan(m[1], &dropped)
	rest := view[i+len(m[0]):]
	for _, stretch := range []string{view[:i], strings.TrimSuffix(view[:i], "\n")} {
		n := int64(len(stretch))
		if pos+n+dropped > int64(len(out)) || string(out[pos:pos+n]) != stretch {
			continue
		}
		if accounts(out, pos+n+dropped, rest) {
			return true
		}
	}
	return false
}

func TestLogReaderWithoutLog(t *testing.T) {
	s := newStore(t)
	r := s.Logs().NewLogReader(storetest.ID, 0)
	defer r.Close()
	if _, err := r.Copy(io.Discard); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Copy without a log = %v", err)
	}
}

// An uncapped log reads as it is, in parts as it grows.
func TestLogReaderUncapped(t *testing.T) {
	s := newStore(t)
	f, _, err := s.Logs().CreateLog(storetest.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := s.Logs().NewLogReader(storetest.ID, 0)
	defer r.Close()
	var b bytes.Buffer
	f.WriteString("one\n")
	r.Copy(&b)
	f.WriteString("two\n")
	r.Copy(&b)
	if b.String() != "one\ntwo\n" {
		t.Errorf("read %q", b.String())
	}
}

// What the cap costs a byte of output: LogWriter against writing the
// log file directly (what an uncapped run does). Past the head, a capped
// log also makes, removes and opens a piece every cap/8 bytes.
func BenchmarkLogWrite(b *testing.B) {
	chunk := output(4 << 10) // what one read from the pipe gives, often
	for _, bc := range []struct {
		name   string
		logMax int64
	}{{"uncapped", 0}, {"cap=1MiB", 1 << 20}, {"cap=64KiB", 64 << 10}} {
		b.Run(bc.name, func(b *testing.B) {
			s := newStore(b)
			var w io.WriteCloser
			if bc.logMax == 0 {
				f, _, err := s.Logs().CreateLog(storetest.ID)
				if err != nil {
					b.Fatal(err)
				}
				w = f
			} else {
				lw, _, err := s.Logs().CreateCappedLog(storetest.ID, bc.logMax)
				if err != nil {
					b.Fatal(err)
				}
				w = lw
			}
			b.SetBytes(int64(len(chunk)))
			for b.Loop() {
				if _, err := w.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			w.Close()
		})
	}
}

// The pieces of a capped log whose run has no record (a prune cut short
// by something older than crew's own order) are a leftover recover sweeps;
// RemoveFinished removes them with their run.
func TestCappedLogPiecesAreNeverLeftBehind(t *testing.T) {
	s := newStore(t)
	w, _, err := s.Logs().CreateCappedLog(storetest.ID, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	writeInChunks(t, w, output(200<<10))
	runlog.Crash(w) // a crash: the pieces stay
	storetest.AssertExists(t, osPath(s, "logs", runlog.TailDirName(storetest.ID)))

	// With a finished record, RemoveFinished takes the pieces too.
	writeDone(t, s, storetest.Record(storetest.ID, record.Succeeded))
	if n := s.FinishedSize(storetest.ID); n < 64<<10/2 {
		t.Errorf("FinishedSize = %d; the pieces count", n)
	}
	if err := s.RemoveFinished(storetest.ID); err != nil {
		t.Fatal(err)
	}
	storetest.AssertMissing(t, osPath(s, "logs", runlog.TailDirName(storetest.ID)))
	storetest.AssertMissing(t, s.Logs().LogPath(storetest.ID))

	// Without any record, they are a leftover.
	w, _, _ = s.Logs().CreateCappedLog(storetest.ID, 64<<10)
	writeInChunks(t, w, output(200<<10))
	runlog.Crash(w)
	left, err := storetest.ReturnsAtOnce(t, "Leftovers", func() ([]runstore.Leftover, error) { return s.Leftovers() })
	if err != nil {
		t.Fatalf("Leftovers = %v", err)
	}
	var tail runstore.Leftover
	listed := map[string]bool{}
	for _, l := range left {
		if k := fmt.Sprintf("%d %s", l.Kind, l.Path); listed[k] {
			t.Errorf("leftover %s listed twice", k)
		} else {
			listed[k] = true
		}
		if l.Kind == runstore.LeftoverLog && strings.HasSuffix(l.Path, ".tail") {
			tail = l
		}
	}
	if tail.Path == "" {
		t.Fatalf("the orphaned pieces are not listed: %+v", left)
	}
	adm, err := s.LockAdmission(context.Background(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if removed, err := adm.RemoveLeftover(tail); !removed || err != nil {
		t.Fatalf("RemoveLeftover = %v, %v", removed, err)
	}
	adm.Release()
	storetest.AssertMissing(t, osPath(s, "logs", runlog.TailDirName(storetest.ID)))
}

func TestParseMarkerReadsWhatDropMarkerWrites(t *testing.T) {
	for _, nl := range []bool{false, true} {
		m := runlog.DropMarker(48234567, 1<<20, nl)
		dropped, n, ok := runlog.ParseMarker([]byte(m + "newest output\n"))
		require.True(t, ok, "%q", m)
		assert.Equal(t, int64(48234567), dropped)
		assert.Equal(t, len(m), n)
	}
	for _, bad := range []string{
		"",
		"[crew: 12 bytes of output dropped here (log capped at 1 MiB)]", // no newline
		"[crew: bytes of output dropped here (log capped at 1 MiB)]\n",
		"[crew: 1x2 bytes of output dropped here (log capped at 1 MiB)]\n",
		"[crew: 12 bytes of output dropped here (log capped at 1\nMiB)]\n",
		"\n\n[crew: 12 bytes of output dropped here (log capped at 1 MiB)]\n",
		"output [crew: 12 bytes of output dropped here (log capped at 1 MiB)]\n",
	} {
		_, _, ok := runlog.ParseMarker([]byte(bad))
		assert.False(t, ok, "%q", bad)
	}
}
