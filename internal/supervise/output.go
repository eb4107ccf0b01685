package supervise

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// drainTimeout is how long crew keeps copying output after the command
// exited, for background processes of the command that still write to its
// stdout or stderr. After that the run is finalized regardless.
const drainTimeout = 2 * time.Second

// output carries the command's stdout and stderr to crew's own streams and
// to the run's log. It uses pipes of its own rather than exec.Cmd's, so that
// the command's exit is seen at once even while a grandchild keeps a pipe
// open — which lets a stop kill that grandchild without waiting.
type output struct {
	child   [2]*os.File // the command's stdout and stderr
	readers []*os.File  // crew's ends: two pipes, or one pseudo-terminal
	tees    []*tee
	wg      sync.WaitGroup
}

// newOutput makes the pipes for the command's stdout and stderr. With a
// tag, each line that reaches crew's own streams is prefixed with it (the
// log keeps the output as written).
func newOutput(stdout, stderr io.Writer, log io.Writer, tag string) (*output, error) {
	o := &output{readers: make([]*os.File, 2), tees: make([]*tee, 2)}
	for i, w := range []io.Writer{stdout, stderr} {
		if tag != "" && w != nil {
			w = newTagWriter(w, tag)
		}
		r, cw, err := os.Pipe()
		if err != nil {
			o.closeAll()
			return nil, fmt.Errorf("create output pipe: %w", err)
		}
		o.readers[i], o.child[i] = r, cw
		o.tees[i] = &tee{out: w, log: log}
	}
	return o, nil
}

// newTerminalOutput carries what the command writes to its terminal
// (stdout and stderr alike) to crew's stdout and to the log, with the
// terminal's "\r\n" back to "\n" there.
func newTerminalOutput(stdout io.Writer, log io.Writer, t *ptyTerm) *output {
	return &output{child: [2]*os.File{t.slave, t.slave}, readers: []*os.File{t.master},
		tees: []*tee{{out: stdout, log: &crlfWriter{w: log}}}}
}

// started closes the command's ends in crew and starts copying.
func (o *output) started() {
	for _, c := range o.child {
		_ = c.Close() // a pseudo-terminal's twice: harmless
	}
	for i := range o.readers {
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			// The tee never fails, so this reads to end of file (or until
			// drain gives up on a grandchild): the command is never
			// blocked on a full pipe nor sent EPIPE because of crew. A
			// pseudo-terminal ends in EIO once the command's side is
			// closed everywhere: its end of file.
			_, _ = io.Copy(o.tees[i], o.readers[i])
			o.tees[i].flush()
			_ = o.readers[i].Close()
		}()
	}
}

// drain waits for the copies to reach end of file, at most drainTimeout.
func (o *output) drain() {
	done := make(chan struct{})
	go func() { o.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(drainTimeout):
		for _, r := range o.readers {
			_ = r.Close()
		}
		<-done
	}
	for _, r := range o.readers {
		_ = r.Close()
	}
}

// closeAll releases every pipe end, for a command that did not start.
func (o *output) closeAll() {
	for _, f := range append(o.child[:], o.readers...) {
		if f != nil {
			_ = f.Close()
		}
	}
}

// logErr is the first error writing the log, if any.
func (o *output) logErr() error {
	for _, t := range o.tees {
		if t.logErr != nil {
			return t.logErr
		}
	}
	return nil
}

// report warns about what did not reach its destination: a log left
// incomplete, or crew's own stdout or stderr that failed (a reader that
// went away: `crew start ... | head -1`) while the log kept everything.
func (o *output) report(warn func(error), id string, logPath string) {
	if err := o.logErr(); err != nil {
		warn(fmt.Errorf("run %s: the log %s is incomplete: %w", id, logPath, err))
	}
	for i, name := range []string{"stdout", "stderr"}[:len(o.tees)] {
		if err := o.tees[i].outErr; err != nil {
			warn(fmt.Errorf("run %s: crew's %s failed (%w); the command's output went on into the log %s", id, name, err, logPath))
		}
	}
}

// tee copies the command's output to crew's own stream and to the log.
// It never returns an error, so the copy never stops reading: a failing
// log never stops the output, and a failing output stream (a closed pipe,
// /dev/full) never stops the log nor disturbs the command. Each is given
// up after its first error.
type tee struct {
	out    io.Writer
	log    io.Writer
	logErr error
	outErr error
}

func (t *tee) Write(p []byte) (int, error) {
	if t.logErr == nil {
		if _, err := t.log.Write(p); err != nil {
			t.logErr = err
		}
	}
	if t.out != nil && t.outErr == nil {
		if _, err := t.out.Write(p); err != nil {
			t.outErr = err
		}
	}
	return len(p), nil
}

// flush writes what the output stream holds back (a tagged stream's
// partial last line), once the command's stream has ended.
func (t *tee) flush() {
	if f, ok := t.log.(interface{ Flush() error }); ok && t.logErr == nil {
		t.logErr = f.Flush()
	}
	f, ok := t.out.(interface{ Flush() error })
	if !ok || t.outErr != nil {
		return
	}
	if err := f.Flush(); err != nil {
		t.outErr = err
	}
}
