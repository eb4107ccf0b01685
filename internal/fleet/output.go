//go:build etcd

package fleet

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runlog"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/supervise"
)

// output copies the command's stdout and stderr to crew's own streams
// and to the run's log on this host. The log keeps everything even when
// crew's own stream fails (a closed terminal, a broken pipe): then the
// copy to that stream stops, the command's output is not lost, and the
// command is not stopped by a full pipe.
type output struct {
	log   logSink
	logMu sync.Mutex
	// tags, with --tag, prefix the lines on crew's streams.
	tags []supervise.TagWriter
	// child are the write ends the command gets; parent's read ends are
	// copied by one goroutine each, to streams (crew's, tagged if asked).
	child   [2]*os.File
	streams []io.Writer
	wg      sync.WaitGroup
	warn    func(error)
	once    sync.Once
}

// newOutput creates the run's log in this host's local state root and the
// two pipes. Without a local root (none could be found), output goes to
// crew's streams only.
func newOutput(logs *runstore.Store, rec *record.Run, stdout, stderr io.Writer, tag string, warn func(error)) (*output, error) {
	id := rec.RunID
	o := &output{warn: warn}
	if logs != nil {
		if err := logs.Ensure(); err != nil {
			return nil, fmt.Errorf("the local state root for run %s's log: %w", id, err)
		}
		var warning string
		var err error
		if rec.LogMax > 0 {
			var w *runlog.Writer
			w, warning, err = logs.Logs().CreateCappedLog(id, rec.LogMax)
			if err == nil {
				o.log = cappedLog{w}
			}
		} else {
			var f *os.File
			f, warning, err = logs.Logs().CreateLog(id)
			if err == nil {
				o.log = plainLog{f}
			}
		}
		if err != nil {
			return nil, err
		}
		if warning != "" {
			warn(errors.New(warning))
		}
	}
	streams := []io.Writer{stdout, stderr}
	if tag != "" {
		for i, w := range streams {
			if w != nil {
				t := supervise.NewTagWriter(w, tag)
				o.tags = append(o.tags, t)
				streams[i] = t
			}
		}
	}
	o.streams = streams
	return o, nil
}

// attach makes the two pipes of one attempt of the command and starts
// copying them; the write ends are in child until closeChild.
func (o *output) attach() error {
	for i, w := range o.streams {
		r, cw, err := os.Pipe()
		if err != nil {
			o.closeChild()
			return fmt.Errorf("make the output pipes: %w", err)
		}
		o.child[i] = cw
		o.wg.Add(1)
		go o.copy(r, w)
	}
	return nil
}

func (o *output) copy(r *os.File, w io.Writer) {
	defer o.wg.Done()
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			o.toLog(buf[:n])
			if w != nil {
				if _, werr := w.Write(buf[:n]); werr != nil {
					w = nil
					o.once.Do(func() {
						o.warn(fmt.Errorf("crew's own output failed (%w); the command's output goes on into its log only", werr))
					})
				}
			}
		}
		if err != nil {
			return // EOF: every writer (the command's group) is gone
		}
	}
}

func (o *output) toLog(b []byte) {
	if o.log == nil {
		return
	}
	o.logMu.Lock()
	defer o.logMu.Unlock()
	if _, err := o.log.Write(b); err != nil && !errors.Is(err, os.ErrClosed) {
		_ = o.log.finish()
		o.log = nil
		o.warn(fmt.Errorf("writing the run's log failed (%w); its output is no longer logged", err))
	}
}

// closeChild closes the parent's copies of the write ends, once the
// command has them.
func (o *output) closeChild() {
	for i, f := range o.child {
		if f != nil {
			f.Close()
			o.child[i] = nil
		}
	}
}

// drain waits until one attempt's output is copied: its whole process
// group is gone.
func (o *output) drain() { o.wg.Wait() }

// finish waits until the output is drained (the command's whole group is
// gone) and makes the log durable.
func (o *output) finish() {
	o.closeChild()
	o.wg.Wait()
	for _, t := range o.tags {
		_ = t.Flush()
	}
	o.logMu.Lock()
	defer o.logMu.Unlock()
	if o.log != nil {
		if err := o.log.finish(); err != nil {
			o.warn(fmt.Errorf("finishing the run's log failed: %w", err))
		}
		o.log = nil
	}
}

// logSink is the run's log: a plain file, or a capped log (--log-max).
type logSink interface {
	io.Writer
	// finish makes the log durable and closes it (a capped log is put
	// together into one file first).
	finish() error
}

type plainLog struct{ f *os.File }

func (l plainLog) Write(b []byte) (int, error) { return l.f.Write(b) }
func (l plainLog) finish() error {
	err := l.f.Sync()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

type cappedLog struct{ w *runlog.Writer }

func (l cappedLog) Write(b []byte) (int, error) { return l.w.Write(b) }
func (l cappedLog) finish() error               { return l.w.Close() }

// note writes one line of crew's own into the log (where a retry's
// attempt begins), not to crew's streams.
func (o *output) note(line string) { o.toLog([]byte(line)) }
