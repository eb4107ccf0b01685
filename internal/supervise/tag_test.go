package supervise

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// recordingWriter keeps every Write as it came.
type recordingWriter struct {
	mu     sync.Mutex
	writes []string
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func (w *recordingWriter) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.writes, "")
}

// Whole lines only: a partial line waits for its newline, however the
// output is cut into writes, and each write carries whole tagged lines.
func TestTagWriterHoldsPartialLines(t *testing.T) {
	out := &recordingWriter{}
	tw := newTagWriter(out, "build\t")
	for _, chunk := range []string{"com", "piling", " a\nlinking", " b\n", "two\nlines\n", "", "no newline at the end"} {
		if n, err := tw.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	for _, w := range out.writes {
		if !strings.HasSuffix(w, "\n") || !strings.HasPrefix(w, "build\t") {
			t.Errorf("a write that is not whole tagged lines: %q", w)
		}
	}
	if got := out.all(); got != "build\tcompiling a\nbuild\tlinking b\nbuild\ttwo\nbuild\tlines\n" {
		t.Errorf("before the end: %q", got)
	}
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := out.all(); !strings.HasSuffix(got, "build\tlines\nbuild\tno newline at the end\n") {
		t.Errorf("the last partial line, at the end: %q", got)
	}
	if err := tw.Flush(); err != nil || strings.Count(out.all(), "no newline") != 1 {
		t.Errorf("a second Flush wrote again: %q", out.all())
	}
}

// A long line is held whole, however it is cut into writes, and goes out
// in one write with its tag (GNU parallel --tag keeps lines whole); the
// buffer it took is let go once written.
func TestTagWriterKeepsLongLinesWhole(t *testing.T) {
	out := &recordingWriter{}
	tw := newTagWriter(out, "t\t")
	long := strings.Repeat("x", 300000)
	for i := 0; i < len(long); i += 4096 {
		tw.Write([]byte(long[i:min(i+4096, len(long))]))
	}
	if len(out.writes) != 0 {
		t.Fatalf("wrote %d times before the line ended", len(out.writes))
	}
	tw.Write([]byte("\nnext\n"))
	if len(out.writes) != 1 || out.writes[0] != "t\t"+long+"\nt\tnext\n" {
		t.Errorf("%d writes, %d bytes; want the whole line and the next in one", len(out.writes), len(out.all()))
	}
	if cap(tw.buf) > bigBuffer || cap(tw.held) > bigBuffer {
		t.Errorf("kept %d and %d bytes of buffers", cap(tw.buf), cap(tw.held))
	}
}

// A line longer than maxTaggedLine goes out in tagged pieces of that
// size, each marked where it was cut: what a tagged stream holds is
// bounded.
func TestTagWriterBoundsWhatItHolds(t *testing.T) {
	out := &recordingWriter{}
	tw := newTagWriter(out, "t\t")
	tw.Write([]byte("before\n" + strings.Repeat("x", 2*maxTaggedLine+10)))
	piece := "t\t" + strings.Repeat("x", maxTaggedLine) + cutMark
	if got := out.all(); got != "t\tbefore\n"+piece+piece {
		t.Errorf("held %d bytes, wrote %d", len(tw.held), len(got))
	}
	if len(tw.held) != len("t\t")+10 {
		t.Errorf("held %d bytes", len(tw.held))
	}
	tw.Write([]byte("y\n"))
	if !strings.HasSuffix(out.all(), cutMark+"t\t"+strings.Repeat("x", 10)+"y\n") {
		t.Errorf("the rest of the line: %q", out.all()[len(out.all())-30:])
	}
}

// Two streams (stdout, stderr) of one run, or of two runs, written to one
// terminal line by line at once: every line arrives whole and tagged, and
// the log keeps the output untagged.
func TestTaggedOutputInterleavesWholeLines(t *testing.T) {
	dir := t.TempDir()
	log, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	term := &recordingWriter{}
	o, err := newOutput(term, term, log, "job\t")
	if err != nil {
		t.Fatal(err)
	}
	// The command's side (its own copies of the pipes' ends, as a child
	// has): both streams, partial lines, at once.
	var ends [2]*os.File
	for i := range ends {
		fd, err := syscall.Dup(int(o.child[i].Fd()))
		if err != nil {
			t.Fatal(err)
		}
		ends[i] = os.NewFile(uintptr(fd), "end")
	}
	o.started()
	var wg sync.WaitGroup
	for i, name := range []string{"out", "err"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 500 {
				io.WriteString(ends[i], name)
				io.WriteString(ends[i], "-")
				io.WriteString(ends[i], strings.Repeat("z", n%7)+"\n")
			}
			io.WriteString(ends[i], name+"-last")
			ends[i].Close()
		}()
	}
	wg.Wait()
	o.drain()
	lines := strings.Split(strings.TrimSuffix(term.all(), "\n"), "\n")
	if len(lines) != 1002 {
		t.Fatalf("%d lines on the terminal, want 1002", len(lines))
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "job\tout-") && !strings.HasPrefix(l, "job\terr-") {
			t.Fatalf("a line cut or untagged: %q", l)
		}
	}
	b, _ := os.ReadFile(log.Name())
	if strings.Contains(string(b), "job\t") || len(b) != len(term.all())-1002*len("job\t")-2 {
		t.Errorf("the log is not the untagged output (%d bytes)", len(b))
	}
}
