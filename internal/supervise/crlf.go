package supervise

import "io"

// crlfWriter turns a terminal's line endings back into plain newlines on
// the way to the run's log: a pseudo-terminal writes each "\n" of the
// command as "\r\n" (ONLCR), and a log, like a pipe's output, should read
// as the command wrote it. A "\r" that is not followed by "\n" (a progress
// bar redrawn in place) is kept; one that ends a write is held until the
// next write shows what follows it, or until Flush.
type crlfWriter struct {
	w   io.Writer
	cr  bool // a "\r" held back from the end of the previous write
	buf []byte
}

func (c *crlfWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.buf = c.buf[:0]
	if c.cr && p[0] != '\n' {
		c.buf = append(c.buf, '\r')
	}
	c.cr = false
	for i, b := range p {
		if b == '\r' {
			if i+1 == len(p) {
				c.cr = true
				break
			}
			if p[i+1] == '\n' {
				continue
			}
		}
		c.buf = append(c.buf, b)
	}
	if len(c.buf) == 0 {
		return len(p), nil
	}
	if _, err := c.w.Write(c.buf); err != nil {
		return len(p), err
	}
	return len(p), nil
}

// Flush writes a "\r" held back from the end of the output.
func (c *crlfWriter) Flush() error {
	if !c.cr {
		return nil
	}
	c.cr = false
	_, err := c.w.Write([]byte{'\r'})
	return err
}
