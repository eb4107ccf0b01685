package finishindex

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

// Reading the index of finished runs, whatever it holds. Anyone who may
// write the state root may append to it, and a power cut may leave a torn
// or zero-filled tail, so a reader meets lines that are not entries: it
// skips them and counts them (status and history report them, crew
// recover rewrites the file without them), and its cost stays linear in
// the bytes it reads, its memory bounded by a chunk and the longest entry,
// however long a line of junk is: a line longer than any entry is
// recognised as junk without being put together.

const (
	// maxEntryBytes bounds an entry's line: three stamps, a run id, a
	// state, an exit code and a quoted task of at most 200 bytes (each
	// byte at most four when quoted) fit with room to spare.
	maxEntryBytes = 2048
	// indexChunk is how much of the index a reader reads at a time.
	indexChunk = 64 << 10
)

// carried is a line being put together from the end back, across
// chunks: its bytes fill buf from the end. A line that grows past
// maxEntryBytes is dropped as it goes (long).
type carried struct {
	buf  [maxEntryBytes]byte
	off  int // the line is buf[off:]
	long bool
}

func (c *carried) reset() { c.off, c.long = len(c.buf), false }

// prepend adds seg in front of the line.
func (c *carried) prepend(seg []byte) {
	if c.long || len(seg) > c.off {
		c.long = true
		return
	}
	c.off -= len(seg)
	copy(c.buf[c.off:], seg)
}

// backward yields the lines of f between offsets from and end, the last
// first; a line longer than maxEntryBytes is yielded as nil, long, and
// never put together. It returns how many bytes it read (each at most
// once). The first line yielded is what follows the last newline before
// end: empty if the region ends with a newline, else an unfinished line.
func backward(f *os.File, from, end int64, yield func(line []byte, long bool) bool) (read int64, err error) {
	buf := make([]byte, indexChunk)
	var c carried
	c.reset()
	for end > from {
		start := max(end-indexChunk, from)
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil && !errors.Is(err, io.EOF) {
			return read, err
		}
		read += int64(len(chunk))
		end = start
		for {
			i := bytes.LastIndexByte(chunk, '\n')
			seg := chunk[i+1:]
			if i < 0 {
				c.prepend(seg) // the line began in an earlier chunk
				break
			}
			line, long := seg, false
			if c.off < len(c.buf) || c.long {
				// The line that went on into the later chunk ends here.
				c.prepend(seg)
				line, long = c.buf[c.off:], c.long
				c.reset()
			}
			if long || len(line) > maxEntryBytes {
				line, long = nil, true
			}
			if !yield(line, long) {
				return read, nil
			}
			chunk = chunk[:i]
		}
	}
	if c.long {
		yield(nil, true)
	} else if c.off < len(c.buf) {
		yield(c.buf[c.off:], false)
	}
	return read, nil
}

// forward yields the lines of f between offsets from and end, in order:
// each whole line (without its newline) as it is, a line longer than
// maxEntryBytes as nil, long; a last line without its newline is not
// yielded (it may be an append still being written) unless it is longer
// than any entry: whole is where the last whole line ends.
func forward(f *os.File, from, end int64, yield func(line []byte, long bool)) (whole int64, err error) {
	buf := make([]byte, indexChunk+maxEntryBytes)
	have := 0 // bytes of an unfinished line at buf[:have]
	long := false
	whole = from
	for pos := from; pos < end; {
		n := int(min(int64(indexChunk), end-pos))
		m, err := f.ReadAt(buf[have:have+n], pos)
		if err != nil && !errors.Is(err, io.EOF) {
			return whole, err
		}
		data := buf[:have+m]
		pos += int64(m)
		for {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				break
			}
			if long {
				yield(nil, true)
			} else {
				yield(data[:i], false)
			}
			long = false
			whole = pos - int64(len(data)) + int64(i) + 1
			data = data[i+1:]
		}
		if len(data) > maxEntryBytes {
			long, data = true, nil
		}
		have = copy(buf, data)
		if m < n {
			break // the file ended early (truncated meanwhile)
		}
	}
	if long {
		yield(nil, true) // longer than any entry: junk, not an append being written
	}
	return whole, nil
}

// readIndexLines reads every entry of f (size bytes), in file order, and
// counts the lines that are not intact entries (junk). whole is where the
// last whole line of what it read ends: an append in progress can show in
// the size of the file before all its bytes do (the kernel extends the
// size page by page), so the last line may be the beginning of an entry,
// and a reader that goes on from size must go on from whole instead.
func readIndexLines(f *os.File, size int64) (entries []finishedEntry, junk int, whole int64, err error) {
	start := min(int64(len(finishedIdxHeader)), size)
	tasks := map[string]string{}
	whole, err = forward(f, start, size, func(line []byte, long bool) {
		if len(line) == 0 && !long {
			return // the empty line in front of each entry
		}
		r, ok := parseRaw(line)
		var e finishedEntry
		if ok {
			e, ok = r.entry(tasks)
		}
		if !ok {
			junk++
			return
		}
		entries = append(entries, e)
	})
	return entries, junk, whole, err
}

// readIndex reads every entry of f (size bytes), in file order.
func readIndex(f *os.File, size int64) ([]finishedEntry, error) {
	entries, _, _, err := readIndexLines(f, size)
	return entries, err
}

// confirmEntries is how many entries a walk of the newest entries reads
// past the one whose stamp would end it, to look for stamps out of order
// before it believes that one.
const confirmEntries = 256

// indexWalk walks the index's entries from the newest (the last) back and
// says what it met on the way.
//
// An entry's append stamp bounds the finishes of the entries before it (to
// within indexSkew), which is what lets a walk end early. That holds only
// while the stamps are in order: appenders stamp each entry no earlier than
// the one before it (appendFinished), so a crew's own appends are, even
// across a clock stepped back; an older crew's, or a line written by hand,
// may not be. So the walk believes a stamp only after reading a further
// confirmEntries entries without one stamped later than it; once it has
// seen any stamp out of order it reads to the beginning (its cost is then
// the file's size), and says so, so that status and history report it and
// crew recover rebuilds the index in order.
type indexWalk struct {
	// Junk counts the lines that are not intact entries; an unfinished
	// last line is not counted (it may be an append being written), unless
	// it is longer than any entry.
	Junk int
	// Disorder: an entry was stamped later than one after it, by more than
	// indexSkew.
	Disorder bool
	// Read is how many bytes the walk read.
	Read int64
}

// walk calls visit with each intact entry, newest first, until visit
// returns false or, stamps permitting, ends(stamp) says that no entry
// before one appended at stamp can matter.
func (w *indexWalk) walk(f *os.File, size int64, visit func(r rawEntry) bool, ends func(stamp time.Time) bool) error {
	first := true
	low := int64(math.MaxInt64) // the lowest stamp so far
	confirm := -1               // entries left to read before the walk ends; -1: not ending
	read, err := backward(f, int64(len(finishedIdxHeader)), size, func(line []byte, long bool) bool {
		tail := first
		first = false
		if len(line) == 0 && !long {
			return true
		}
		r, ok := parseRaw(line)
		if !ok {
			if long || !tail {
				w.Junk++
			}
			return true
		}
		if r.appended > low && uint64(r.appended-low) > uint64(indexSkew) {
			w.Disorder, confirm = true, -1
		}
		low = min(low, r.appended)
		if !w.Disorder && confirm < 0 && ends(r.appendedAt()) {
			confirm = confirmEntries
		}
		if confirm == 0 {
			return false
		}
		if confirm > 0 {
			confirm--
		}
		return visit(r)
	})
	w.Read = read
	return err
}

// problem says what the walk found wrong with the index, "" if nothing.
func (w *indexWalk) problem(path string) string {
	var what []string
	if w.Junk > 0 {
		what = append(what, fmt.Sprintf("%d line(s) that are not entries crew wrote (skipped)", w.Junk))
	}
	if w.Disorder {
		what = append(what, "entries stamped out of order (a clock set back, or an edit by hand; read in full)")
	}
	if len(what) == 0 {
		return ""
	}
	return fmt.Sprintf("the index of finished runs %s has %s; `crew recover` repairs it", path, strings.Join(what, " and "))
}

// lastStamp is the append stamp of the last intact entry among the last
// few KiB of f (size bytes), or 0 if there is none there.
func lastStamp(f *os.File, size int64) int64 {
	var stamp int64
	from := max(int64(len(finishedIdxHeader)), size-2*maxEntryBytes)
	_, _ = backward(f, from, size, func(line []byte, _ bool) bool {
		r, ok := parseRaw(line)
		if ok {
			stamp = r.appended
		}
		return !ok
	})
	return stamp
}
