package supervise

import (
	"bytes"
	"io"
)

// maxHeldLine bounds the partial line a tagged stream holds back: a
// longer one (a progress bar redrawn with \r, a binary) is written out in
// pieces of this size, each tagged and ended with a newline.
const maxHeldLine = 64 << 10

// tagWriter prefixes every line of a stream with a tag (`crew start
// --tag`): whole lines only, each written at once with its tag, so lines
// of several runs (and of one run's stdout and stderr) interleave without
// being cut. A partial line waits for its newline, or for Flush at the
// end of the stream, which ends it with a newline.
type tagWriter struct {
	w       io.Writer
	tag     []byte
	partial []byte
	buf     []byte
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
			take := min(len(p), maxHeldLine-len(t.partial))
			t.partial = append(t.partial, p[:take]...)
			p = p[take:]
			if len(t.partial) == maxHeldLine {
				t.line(nil)
			}
			continue
		}
		t.line(p[:i+1])
		p = p[i+1:]
	}
	if len(t.buf) == 0 {
		return n, nil
	}
	if _, err := t.w.Write(t.buf); err != nil {
		return n, err
	}
	return n, nil
}

// line adds the held partial line and rest (ending with its newline, or
// nil to end the held line with one) to the buffer, tagged.
func (t *tagWriter) line(rest []byte) {
	t.buf = append(t.buf, t.tag...)
	t.buf = append(t.buf, t.partial...)
	if rest == nil {
		rest = []byte{'\n'}
	}
	t.buf = append(t.buf, rest...)
	t.partial = t.partial[:0]
}

// Flush writes a held partial line, tagged and ended with a newline.
func (t *tagWriter) Flush() error {
	if len(t.partial) == 0 {
		return nil
	}
	t.buf = t.buf[:0]
	t.line(nil)
	_, err := t.w.Write(t.buf)
	return err
}
