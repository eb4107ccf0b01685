package supervise

import (
	"bytes"
	"io"
)

// maxTaggedLine bounds the partial line a tagged stream holds back, and so
// the memory it takes: 16 MiB, far above any line of text (GNU parallel
// --tag keeps lines whole whatever their length; a line of JSON or a
// minified asset can take megabytes). A longer line (a binary, a progress
// bar redrawn with \r for hours) goes out in pieces of this size, each
// tagged and marked where it was cut; the log keeps it whole.
const maxTaggedLine = 16 << 20

// cutMark ends the piece of a line cut at maxTaggedLine.
const cutMark = "…[crew --tag: a line longer than 16 MiB, cut here; the run's log has it whole]\n"

// bigBuffer is the capacity above which a buffer is let go once written,
// rather than kept for the next line.
const bigBuffer = 1 << 20

// tagWriter prefixes every line of a stream with a tag (`crew start
// --tag`): whole lines only, each written at once with its tag, so lines
// of several runs (and of one run's stdout and stderr) interleave without
// being cut. A partial line waits for its newline, or for Flush at the
// end of the stream, which ends it with a newline.
type tagWriter struct {
	w   io.Writer
	tag []byte
	// held is the tag and the partial line so far; empty when there is
	// none.
	held []byte
	// buf collects the whole tagged lines of one Write.
	buf []byte
}

// TagWriter is a stream whose lines are prefixed with a tag (crew start
// --tag) for another backend's supervisor; Flush ends a partial last line.
type TagWriter interface {
	io.Writer
	Flush() error
}

// NewTagWriter prefixes every whole line written to w with tag.
func NewTagWriter(w io.Writer, tag string) TagWriter { return newTagWriter(w, tag) }

func newTagWriter(w io.Writer, tag string) *tagWriter {
	return &tagWriter{w: w, tag: []byte(tag)}
}

func (t *tagWriter) Write(p []byte) (int, error) {
	n := len(p)
	t.buf = t.buf[:0]
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if err := t.hold(p); err != nil {
				return n, err
			}
			break
		}
		t.end(p[:i+1])
		p = p[i+1:]
	}
	return n, t.writeBuf()
}

// end adds a line, ended by rest (with its newline), to the buffer,
// tagged: the held beginning of the line, or the tag.
func (t *tagWriter) end(rest []byte) {
	if len(t.held) == 0 {
		t.buf = append(append(t.buf, t.tag...), rest...)
		return
	}
	t.held = append(t.held, rest...)
	if len(t.buf) == 0 {
		// The held line comes first in its Write: it becomes the
		// buffer, so a long line is never copied.
		t.buf, t.held = t.held, t.buf[:0]
		return
	}
	t.buf = append(t.buf, t.held...)
	t.held = release(t.held)
}

// hold keeps p, the beginning of a line, until its newline; a line that
// grows to maxTaggedLine goes out cut, marked, and goes on as a new line.
func (t *tagWriter) hold(p []byte) error {
	for len(p) > 0 {
		if len(t.held) == 0 {
			t.held = append(t.held, t.tag...)
		}
		take := min(len(p), len(t.tag)+maxTaggedLine-len(t.held))
		t.held = append(t.held, p[:take]...)
		p = p[take:]
		if len(t.held)-len(t.tag) < maxTaggedLine {
			return nil
		}
		// The whole lines before it go first.
		if err := t.writeBuf(); err != nil {
			return err
		}
		t.held = append(t.held, cutMark...)
		_, err := t.w.Write(t.held)
		t.held = release(t.held)
		if err != nil {
			return err
		}
	}
	return nil
}

// writeBuf writes the buffered whole lines.
func (t *tagWriter) writeBuf() error {
	if len(t.buf) == 0 {
		return nil
	}
	_, err := t.w.Write(t.buf)
	t.buf = release(t.buf)
	return err
}

// release empties a written buffer, and lets go of a big one.
func release(b []byte) []byte {
	if cap(b) > bigBuffer {
		return nil
	}
	return b[:0]
}

// Flush writes a held partial line, tagged and ended with a newline.
func (t *tagWriter) Flush() error {
	if len(t.held) == 0 {
		return nil
	}
	t.held = append(t.held, '\n')
	_, err := t.w.Write(t.held)
	t.held = release(t.held)
	return err
}
