// Package runlog keeps the runs' logs in a state root's logs/ directory:
// a run's output as its command wrote it (logs/<run-id>.log), capped or
// not (capped.go: the head, the tail's pieces in logs/<run-id>.tail/, put
// together at the end), the one reader of any log, live, finished or
// crashed (Reader), and the hold of a waiter that keeps a run from being
// pruned while it looks (hold.go). It reaches logs/ only through the
// handle package runstore gives it (stateroot.Dir).
package runlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
	"github.com/crew-dev/crew/internal/stateroot"
)

// Logs is a state root's logs/ directory.
type Logs struct {
	dir stateroot.Dir
}

// New returns the logs kept in dir (the state root's logs/).
func New(dir stateroot.Dir) *Logs { return &Logs{dir: dir} }

func logName(id record.RunID) string { return string(id) + ".log" }

// RunOf says which run a name in logs/ belongs to: a log, or the tail of
// a capped log (tail).
func RunOf(name string) (id record.RunID, tail, ok bool) {
	base, ok := strings.CutSuffix(name, ".log")
	if !ok {
		base, ok = strings.CutSuffix(name, ".tail")
		tail = ok
	}
	if !ok || !record.LooksLikeRunID(base) {
		return "", false, false
	}
	return record.RunID(base), tail, true
}

// LogPath is the path of a run's log, for messages and `crew status`.
func (l *Logs) LogPath(id record.RunID) string { return l.dir.Path(logName(id)) }

// CreateLog creates a run's log, exclusively, for appending. The run's id
// is readable in queue/ and runs/active/ before its log exists, so a log
// can be planted ahead of it (a link to a file outside, a FIFO, a file
// with content of someone's choosing). Whatever is at the name already is
// moved aside into quarantine/ with a note, and a fresh log is made; the
// returned warning says so (empty if nothing was in the way).
func (l *Logs) CreateLog(id record.RunID) (f *os.File, warning string, err error) {
	dir, err := l.dir.Open()
	if err != nil {
		return nil, "", fmt.Errorf("open the log of run %s: %w", id, err)
	}
	defer dir.Close()
	name := logName(id)
	flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL | os.O_APPEND
	f, err = rootfs.Open(dir, name, flag, l.dir.FilePerm())
	if errors.Is(err, fs.ErrExist) {
		what := "something"
		if fi, lerr := dir.Lstat(name); lerr == nil {
			what = describe(fi)
		}
		why := fmt.Sprintf("%s existed before run %s started, so crew did not write to it (planted, or left by something other than crew)", what, id)
		dest, qerr := l.dir.Quarantine(name, why, "crew start")
		if qerr != nil {
			return nil, "", fmt.Errorf("open the log of run %s: %s is in the way and could not be moved aside: %w", id, l.LogPath(id), qerr)
		}
		warning = fmt.Sprintf("%s existed before the run started (%s); crew moved it to %s and writes the run's output to a fresh log", l.LogPath(id), what, dest)
		f, err = rootfs.Open(dir, name, flag, l.dir.FilePerm())
	}
	if err != nil {
		return nil, "", fmt.Errorf("open the log of run %s: %w", id, stateroot.UnwrapPath(err))
	}
	return f, warning, nil
}

// describe says what a directory entry is, for notes and warnings.
func describe(fi os.FileInfo) string {
	if fi.Mode().IsRegular() {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			return fmt.Sprintf("a file with %d hard links", st.Nlink)
		}
	}
	return rootfs.Kind(fi.Mode())
}

// OpenLog opens a run's log for reading; fs.ErrNotExist if it has none.
func (l *Logs) OpenLog(id record.RunID) (*os.File, error) {
	dir, err := l.dir.Open()
	if err != nil {
		return nil, fmt.Errorf("read the log of run %s: %w", id, err)
	}
	defer dir.Close()
	f, err := rootfs.Open(dir, logName(id), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("read the log of run %s: %w", id, stateroot.UnwrapPath(err))
	}
	return f, nil
}

// HasLog reports whether the run has a log file.
func (l *Logs) HasLog(id record.RunID) bool {
	dir, err := l.dir.Open()
	if err != nil {
		return false
	}
	defer dir.Close()
	fi, err := dir.Lstat(logName(id))
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Nlink == 1 // a second link: OpenLog refuses it
}

// Remove deletes a run's log: the pieces of a capped log's tail, then the
// log itself. The caller holds the log (LockToRemove) while it does.
func (l *Logs) Remove(id record.RunID) error {
	if err := l.RemoveTail(id); err != nil {
		return fmt.Errorf("remove the log of run %s: %w", id, err)
	}
	if dir, err := l.dir.Open(); err == nil {
		err := l.dir.Remove(dir, logName(id))
		dir.Close()
		if err != nil {
			return fmt.Errorf("remove the log of run %s: %w", id, stateroot.UnwrapPath(err))
		}
	}
	return nil
}

// Sizer stats the logs of many runs through one handle on logs/.
type Sizer struct {
	dir *os.Root
}

// Sizer opens logs/ for a measurement of many runs' logs; Close it.
func (l *Logs) Sizer() (*Sizer, error) {
	dir, err := l.dir.Open()
	if err != nil {
		return nil, err
	}
	return &Sizer{dir: dir}, nil
}

// Close releases the handle on logs/.
func (z *Sizer) Close() { z.dir.Close() }

// Head is the size of run id's log file (all of its log, or a capped
// log's head while its tail is apart); ok is false if it has none.
func (z *Sizer) Head(id record.RunID) (size int64, ok bool) {
	fi, err := z.dir.Lstat(logName(id))
	if err != nil {
		return 0, false
	}
	return fi.Size(), true
}

// HasTail reports whether run id has the tail of a capped log apart
// (TailBytes says what it takes).
func (z *Sizer) HasTail(id record.RunID) bool {
	_, err := z.dir.Lstat(tailDirName(id))
	return err == nil
}
