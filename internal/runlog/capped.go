package runlog

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"sync"

	"github.com/crew-dev/crew/internal/bytesize"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
	"github.com/crew-dev/crew/internal/stateroot"
)

// Capped logs. A run whose record has logMax C > 0 keeps the beginning and
// the newest part of its output, never more than C bytes on disk:
//
//	logs/<id>.log                the first C/2 bytes of output: the head
//	logs/<id>.tail/<offset>      the newest output, in pieces of C/8 bytes
//	                             (at least 32 KiB, at most C/4), each named
//	                             by the offset of its first byte in the
//	                             output (20 decimal digits); as many as fit
//	                             in C/2 (4, or 2 for caps under 256 KiB):
//	                             the oldest goes when one more begins
//
// When the run ends, its supervisor appends to logs/<id>.log a marker line
// and the pieces in order, fsyncs it, and only then removes the pieces and
// the directory, so a finished run's log is one plain file:
//
//	<the first C/2 bytes>
//	[crew: 48234567 bytes of output dropped here (log capped at 1 MiB)]
//	<the newest 3/8 to 1/2 of C bytes (1/4 to 1/2 under 256 KiB)>
//
// (the marker starts on a line of its own: a newline goes before it if the
// head does not end with one; no marker if nothing was dropped). A crash
// before the end leaves the head and the pieces, which every reader (crew
// logs, crew logs -f) puts together into the same view; a crash while the
// pieces were being appended leaves them too, and readers tell a complete
// append (the head file holds at least head + marker + pieces) from an
// incomplete one. Nothing here is fsynced while the run writes: a log is
// output, not a record.

// Pieces of the tail: an eighth of the cap, 4 of them, but not under
// 32 KiB (2 of them, then, for a cap under 256 KiB): making and removing
// pieces (a file creation is the dearest step of a write) must not cost
// the command more than a few nanoseconds a byte.
const (
	logCapPieces  = 4
	minPieceBytes = 32 << 10
)

// capGeometry is the head's size, a piece's size and how many pieces are
// kept, for a cap: head + pieces × piece never exceeds the cap, and the
// tail keeps at least (pieces-1) × piece: 3/8 of the cap, or 1/4 for caps
// under 256 KiB.
func capGeometry(logMax int64) (head, piece int64, pieces int) {
	head = logMax / 2
	piece = max(logMax/(2*logCapPieces), min(minPieceBytes, (logMax-head)/2), 1)
	return head, piece, int(max((logMax-head)/piece, 1))
}

func tailDirName(id record.RunID) string { return string(id) + ".tail" }

func pieceName(off int64) string { return fmt.Sprintf("%020d", off) }

// dropMarker is the line that stands for dropped output; nl puts it on a
// line of its own after output that did not end with a newline.
func dropMarker(dropped, logMax int64, nl bool) string {
	m := fmt.Sprintf("[crew: %d bytes of output dropped here (log capped at %s)]\n", dropped, bytesize.Format(logMax))
	if nl {
		return "\n" + m
	}
	return m
}

// parseMarker reads the marker dropMarker wrote at the start of b (after
// an optional newline): the number of bytes it says were dropped and the
// marker's length. Hand-parsed, not a regular expression, because every
// crew process would compile one at start-up.
func parseMarker(b []byte) (dropped int64, n int, ok bool) {
	rest := bytes.TrimPrefix(b, []byte("\n"))
	rest, found := bytes.CutPrefix(rest, []byte("[crew: "))
	if !found {
		return 0, 0, false
	}
	digits, rest, found := bytes.Cut(rest, []byte(" bytes of output dropped here (log capped at "))
	if !found || len(digits) == 0 {
		return 0, 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, 0, false
		}
	}
	dropped, err := strconv.ParseInt(string(digits), 10, 64)
	if err != nil {
		return 0, 0, false
	}
	capText, rest, found := bytes.Cut(rest, []byte(")]\n"))
	if !found || bytes.ContainsAny(capText, ")\n") {
		return 0, 0, false
	}
	return dropped, len(b) - len(rest), true
}

// Writer writes a capped log. It is safe for the two copies of the
// command's output (stdout, stderr) to write at once. It never blocks on
// anything but its own writes: when the head is full, output goes to the
// pieces, and an old piece is removed (one unlink) when a new one begins.
type Writer struct {
	l      *Logs
	id     record.RunID
	logMax int64

	mu      sync.Mutex
	head    *os.File
	written int64 // bytes of output so far
	last    byte  // the last byte written into the head
	tail    *os.Root
	cur     *os.File // the piece being written
	curLen  int64
	pieces  []int64 // offsets of the pieces on disk, oldest first
	err     error
}

// CreateCappedLog opens a run's log for writing with a cap of logMax
// bytes (at least record.MinLogMax is sensible; anything positive works).
// warning is CreateLog's: a planted file moved aside.
func (l *Logs) CreateCappedLog(id record.RunID, logMax int64) (w *Writer, warning string, err error) {
	if logMax <= 0 {
		return nil, "", fmt.Errorf("log cap of run %s: %d is not positive", id, logMax)
	}
	f, warning, err := l.CreateLog(id)
	if err != nil {
		return nil, "", err
	}
	return &Writer{l: l, id: id, logMax: logMax, head: f}, warning, nil
}

// Write takes output in order; it reports all of p written unless a write
// failed, after which every call fails with that error.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	n := len(p)
	headMax, pieceMax, _ := capGeometry(w.logMax)
	if w.written < headMax {
		k := int(min(int64(len(p)), headMax-w.written))
		if _, err := w.head.Write(p[:k]); err != nil {
			w.err = err
			return 0, err
		}
		w.last = p[k-1]
		w.written += int64(k)
		p = p[k:]
	}
	for len(p) > 0 {
		if w.cur == nil || w.curLen == pieceMax {
			if err := w.nextPiece(); err != nil {
				w.err = err
				return 0, err
			}
		}
		k := int(min(int64(len(p)), pieceMax-w.curLen))
		if _, err := w.cur.Write(p[:k]); err != nil {
			w.err = err
			return 0, err
		}
		w.curLen += int64(k)
		w.written += int64(k)
		p = p[k:]
	}
	return n, nil
}

// nextPiece starts a piece at the current offset and removes the oldest
// if there are more than logCapPieces.
func (w *Writer) nextPiece() error {
	if w.cur != nil {
		if err := w.cur.Close(); err != nil {
			return w.fail("close a piece of", err)
		}
		w.cur = nil
	}
	if w.tail == nil {
		dir, err := w.l.ensureTailDir(w.id)
		if err != nil {
			return w.fail("open the tail of", err)
		}
		w.tail = dir
	}
	name := pieceName(w.written)
	f, err := rootfs.Open(w.tail, name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, w.l.dir.FilePerm())
	if err != nil {
		return w.fail("start a piece of", err)
	}
	w.cur, w.curLen = f, 0
	w.pieces = append(w.pieces, w.written)
	if _, _, keep := capGeometry(w.logMax); len(w.pieces) > keep {
		if err := w.l.dir.Remove(w.tail, pieceName(w.pieces[0])); err != nil {
			return w.fail("drop the oldest piece of", err)
		}
		w.pieces = w.pieces[1:]
	}
	return nil
}

func (w *Writer) fail(what string, err error) error {
	return fmt.Errorf("%s the log %s: %w", what, w.l.dir.Path(tailDirName(w.id)), stateroot.UnwrapPath(err))
}

// Written is how many bytes of output the log was given.
func (w *Writer) Written() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written
}

// Close makes the log one file (head, marker, tail; see above) and
// closes it. If that fails (a full disk), the head and the pieces stay,
// and readers still show the whole view.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	if w.cur != nil {
		errs = append(errs, w.cur.Close())
		w.cur = nil
	}
	if len(w.pieces) > 0 && w.err == nil && errors.Join(errs...) == nil {
		errs = append(errs, w.compose())
	}
	if w.tail != nil {
		errs = append(errs, w.tail.Close())
	}
	errs = append(errs, w.head.Close())
	return errors.Join(errs...)
}

// compose appends the marker and the pieces to the head, makes that
// durable, then removes the pieces: a crash at any point leaves either
// the pieces (readers use them) or a complete file.
func (w *Writer) compose() error {
	headMax, _, _ := capGeometry(w.logMax)
	if dropped := w.pieces[0] - headMax; dropped > 0 {
		if _, err := io.WriteString(w.head, dropMarker(dropped, w.logMax, w.last != '\n')); err != nil {
			return w.fail("append the tail to", err)
		}
	}
	for _, off := range w.pieces {
		f, err := rootfs.Open(w.tail, pieceName(off), os.O_RDONLY, 0)
		if err != nil {
			return w.fail("read a piece of", err)
		}
		_, err = io.Copy(w.head, f)
		f.Close()
		if err != nil {
			return w.fail("append the tail to", err)
		}
	}
	if err := w.head.Sync(); err != nil {
		return w.fail("sync", err)
	}
	return w.l.RemoveTail(w.id)
}

// ensureTailDir creates (if needed) and opens logs/<id>.tail.
func (l *Logs) ensureTailDir(id record.RunID) (*os.Root, error) {
	logs, err := l.dir.Open()
	if err != nil {
		return nil, err
	}
	defer logs.Close()
	if err := l.dir.Mkdir(logs, tailDirName(id)); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	return l.dir.OpenIn(logs, tailDirName(id))
}

// RemoveTail removes a run's pieces and their directory, if any. Only
// regular files are removed; anything else in there makes it an error.
func (l *Logs) RemoveTail(id record.RunID) error {
	logs, err := l.dir.Open()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer logs.Close()
	name := tailDirName(id)
	tail, err := l.dir.OpenIn(logs, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	names, err := l.dir.List(tail)
	if err == nil {
		for _, n := range names {
			if fi, lerr := tail.Lstat(n); lerr == nil && fi.Mode().IsRegular() {
				if rerr := l.dir.Remove(tail, n); rerr != nil {
					err = rerr
					break
				}
			}
		}
	}
	tail.Close()
	if err != nil {
		return fmt.Errorf("remove %s: %w", l.dir.Path(name), stateroot.UnwrapPath(err))
	}
	if err := logs.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", l.dir.Path(name), stateroot.UnwrapPath(err))
	}
	return nil
}

// piece is one piece of a capped log's tail as a reader finds it.
type piece struct {
	off, size int64
}

// listPieces lists a run's pieces, oldest first; none if it has no tail.
func (l *Logs) listPieces(id record.RunID) ([]piece, error) {
	logs, err := l.dir.Open()
	if err != nil {
		return nil, err
	}
	defer logs.Close()
	tail, err := l.dir.OpenIn(logs, tailDirName(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer tail.Close()
	names, err := l.dir.List(tail)
	if err != nil {
		return nil, err
	}
	var out []piece
	for _, n := range names {
		off, err := strconv.ParseInt(n, 10, 64)
		if err != nil || len(n) != 20 || off < 0 {
			continue
		}
		fi, err := tail.Lstat(n)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		out = append(out, piece{off: off, size: fi.Size()})
	}
	slices.SortFunc(out, func(a, b piece) int { return cmp.Compare(a.off, b.off) })
	return out, nil
}

// TailBytes is what a run's pieces take on disk (none once its capped
// log was put together).
func (l *Logs) TailBytes(id record.RunID) int64 {
	ps, _ := l.listPieces(id)
	var n int64
	for _, p := range ps {
		n += p.size
	}
	return n
}

// Reader reads a run's log as the command wrote it, while the run
// writes and after it ended: each Copy writes what is new since the last.
// For a capped log it puts the head and the newest output together (see
// above); where output it has not shown was dropped meanwhile (a reader
// that fell behind, or one that starts after the head), it writes the
// marker line in its place, as the finished log has it.
type Reader struct {
	l      *Logs
	id     record.RunID
	logMax int64

	head *os.File
	pos  int64 // offset in the output of the next byte to show
	last byte  // the last byte shown
}

// NewLogReader reads the log of run id, written with cap logMax (the
// run's record says; 0 for none).
func (l *Logs) NewLogReader(id record.RunID, logMax int64) *Reader {
	return &Reader{l: l, id: id, logMax: logMax, last: '\n'}
}

// Close releases the reader's file.
func (r *Reader) Close() error {
	if r.head == nil {
		return nil
	}
	return r.head.Close()
}

// Copy writes to w what the log holds beyond what was already shown. It
// returns fs.ErrNotExist (wrapped) while the run has no log.
func (r *Reader) Copy(w io.Writer) (int64, error) {
	if r.head == nil {
		f, err := r.l.OpenLog(r.id)
		if err != nil {
			return 0, err
		}
		r.head = f
	}
	if r.logMax <= 0 {
		n, err := r.copyAt(w, r.head, r.pos, -1)
		r.pos += n
		return n, err
	}
	var total int64
	headMax, _, _ := capGeometry(r.logMax)
	if r.pos < headMax {
		fi, err := r.head.Stat()
		if err != nil {
			return 0, err
		}
		n, err := r.copyAt(w, r.head, r.pos, min(headMax, fi.Size())-r.pos)
		r.pos += n
		total += n
		if err != nil || r.pos < headMax {
			return total, err
		}
	}
	// The pieces may be appended to the head and removed while we read
	// them: then look again, once.
	for attempt := 0; ; attempt++ {
		fi, err := r.head.Stat()
		if err != nil {
			return total, err
		}
		pieces, err := r.l.listPieces(r.id)
		if err != nil {
			return total, err
		}
		if len(pieces) == 0 || r.composed(fi.Size(), pieces) {
			n, err := r.copyComposed(w)
			return total + n, err
		}
		n, vanished, err := r.copyPieces(w, pieces)
		total += n
		if err != nil || !vanished || attempt == 1 {
			return total, err
		}
	}
}

// composed reports whether the head file already holds the whole view:
// the pieces were appended, and are only waiting to be removed.
func (r *Reader) composed(size int64, pieces []piece) bool {
	headMax, _, _ := capGeometry(r.logMax)
	want := headMax
	if dropped := pieces[0].off - headMax; dropped > 0 {
		want += int64(len(dropMarker(dropped, r.logMax, r.headLast() != '\n')))
	}
	for _, p := range pieces {
		want += p.size
	}
	return size >= want
}

// headLast is the last byte of the head.
func (r *Reader) headLast() byte {
	headMax, _, _ := capGeometry(r.logMax)
	var b [1]byte
	if _, err := r.head.ReadAt(b[:], headMax-1); err != nil {
		return '\n'
	}
	return b[0]
}

// skipTo shows the marker for output dropped before off, and moves there.
func (r *Reader) skipTo(w io.Writer, off int64) (int64, error) {
	if off <= r.pos {
		return 0, nil
	}
	m := dropMarker(off-r.pos, r.logMax, r.last != '\n')
	n, err := io.WriteString(w, m)
	r.pos, r.last = off, '\n'
	return int64(n), err
}

// copyPieces shows the pieces beyond what was shown; vanished says a
// piece was removed before it could be read.
func (r *Reader) copyPieces(w io.Writer, pieces []piece) (total int64, vanished bool, err error) {
	for _, p := range pieces {
		if p.off+p.size <= r.pos {
			continue
		}
		f, err := r.l.openPiece(r.id, p.off)
		if errors.Is(err, fs.ErrNotExist) {
			return total, true, nil
		}
		if err != nil {
			return total, false, err
		}
		n, err := r.skipTo(w, p.off)
		total += n
		if err == nil {
			n, err = r.copyAt(w, f, r.pos-p.off, -1)
			r.pos += n
			total += n
		}
		f.Close()
		if err != nil {
			return total, false, err
		}
	}
	return total, false, nil
}

// copyComposed shows a finished capped log beyond its head.
func (r *Reader) copyComposed(w io.Writer) (int64, error) {
	headMax, _, _ := capGeometry(r.logMax)
	fi, err := r.head.Stat()
	if err != nil {
		return 0, err
	}
	if fi.Size() <= headMax {
		return 0, nil
	}
	start, body := headMax, headMax // the marker's first byte; the tail's first byte in the file
	tailOff := headMax              // the tail's first byte in the output
	buf := make([]byte, 256)
	n, _ := r.head.ReadAt(buf, headMax)
	if dropped, k, ok := parseMarker(buf[:n]); ok {
		body = start + int64(k)
		tailOff = headMax + dropped
	}
	var total int64
	if r.pos == headMax && body > start {
		// Show the marker as the file has it.
		k, err := r.copyAt(w, r.head, start, body-start)
		total += k
		r.pos = tailOff
		if err != nil {
			return total, err
		}
	}
	k, err := r.skipTo(w, tailOff)
	total += k
	if err != nil {
		return total, err
	}
	k, err = r.copyAt(w, r.head, body+r.pos-tailOff, -1)
	r.pos += k
	return total + k, err
}

// copyAt copies up to n bytes (n < 0: to the end) of f from off to w and
// remembers the last byte shown.
func (r *Reader) copyAt(w io.Writer, f *os.File, off, n int64) (int64, error) {
	if n == 0 {
		return 0, nil
	}
	var src io.Reader = io.NewSectionReader(f, off, 1<<62)
	if n > 0 {
		src = io.LimitReader(src, n)
	}
	lw := &lastByte{w: w}
	k, err := io.Copy(lw, src)
	if k > 0 {
		r.last = lw.last
	}
	return k, err
}

type lastByte struct {
	w    io.Writer
	last byte
}

func (l *lastByte) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	if n > 0 {
		l.last = p[n-1]
	}
	return n, err
}

// openPiece opens one piece of a run's tail for reading.
func (l *Logs) openPiece(id record.RunID, off int64) (*os.File, error) {
	logs, err := l.dir.Open()
	if err != nil {
		return nil, err
	}
	defer logs.Close()
	tail, err := l.dir.OpenIn(logs, tailDirName(id))
	if err != nil {
		return nil, err
	}
	defer tail.Close()
	return rootfs.Open(tail, pieceName(off), os.O_RDONLY, 0)
}
