package runstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
)

// Stop requests: owners/<run-id>.stop, until the run is final.

func stopRequestName(id record.RunID) string { return string(id) + ".stop" }

// WriteStopRequest durably records who asked to stop a run, before any
// signal is sent, so whoever finalizes it can say so.
func (s *Store) WriteStopRequest(id record.RunID, r *record.StopRequest) error {
	b, err := r.Encode()
	if err != nil {
		return err
	}
	dir, err := s.dir(ownersDir)
	if err == nil {
		defer dir.Close()
		err = writeFile(dir, stopRequestName(id), b, durable)
	}
	if err != nil {
		return fmt.Errorf("record the stop request for run %s: %w", id, unwrapPath(err))
	}
	return nil
}

// ReadStopRequest returns the run's stop request, or nil if there is none
// (or it cannot be read: it only adds who asked to a stopped run's reason).
func (s *Store) ReadStopRequest(id record.RunID) *record.StopRequest {
	dir, err := s.dir(ownersDir)
	if err != nil {
		return nil
	}
	defer dir.Close()
	data, err := rootfs.ReadFile(dir, stopRequestName(id), 64<<10)
	if err != nil {
		return nil
	}
	r, err := record.DecodeStopRequest(data)
	if err != nil {
		return nil
	}
	return r
}

// RemoveStopRequest removes the run's stop request, if any.
func (s *Store) RemoveStopRequest(id record.RunID) error {
	dir, err := s.dir(ownersDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		defer dir.Close()
		err = removeFile(dir, stopRequestName(id))
	}
	if err != nil {
		return fmt.Errorf("remove the stop request of run %s: %w", id, unwrapPath(err))
	}
	return nil
}

// Logs: logs/<run-id>.log, the command's stdout and stderr.

func logName(id record.RunID) string { return string(id) + ".log" }

// LogPath is the path of a run's log, for messages and `crew status`.
func (s *Store) LogPath(id record.RunID) string { return s.display(logsDir, logName(id)) }

// CreateLog opens a run's log for appending, creating it.
func (s *Store) CreateLog(id record.RunID) (*os.File, error) {
	dir, err := s.dir(logsDir)
	if err != nil {
		return nil, fmt.Errorf("open the log of run %s: %w", id, err)
	}
	defer dir.Close()
	f, err := rootfs.Open(dir, logName(id), os.O_WRONLY|os.O_CREATE|os.O_APPEND, FilePerm)
	if err != nil {
		return nil, fmt.Errorf("open the log of run %s: %w", id, unwrapPath(err))
	}
	return f, nil
}

// OpenLog opens a run's log for reading; fs.ErrNotExist if it has none.
func (s *Store) OpenLog(id record.RunID) (*os.File, error) {
	dir, err := s.dir(logsDir)
	if err != nil {
		return nil, fmt.Errorf("read the log of run %s: %w", id, err)
	}
	defer dir.Close()
	f, err := rootfs.Open(dir, logName(id), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("read the log of run %s: %w", id, unwrapPath(err))
	}
	return f, nil
}

// HasLog reports whether the run has a log file.
func (s *Store) HasLog(id record.RunID) bool {
	dir, err := s.dir(logsDir)
	if err != nil {
		return false
	}
	defer dir.Close()
	fi, err := dir.Lstat(logName(id))
	return err == nil && fi.Mode().IsRegular()
}

// Refusals: refusals.log, one JSON line per refused start.

// refusalsLogLimit bounds refusals.log; past it the log starts over, so
// recording a refusal stays one small append.
const refusalsLogLimit = 1 << 20

// AppendRefusal appends a refusal: one O_APPEND write of one line, no
// fsync. It is a diagnostic, not a record, and must never slow admission.
func (s *Store) AppendRefusal(r record.Refusal) {
	line, err := json.Marshal(r)
	if err != nil {
		return
	}
	root, err := s.openRoot()
	if err != nil {
		return
	}
	if fi, err := root.Lstat(refusalsName); err == nil && fi.Mode().IsRegular() && fi.Size() > refusalsLogLimit {
		_ = root.Rename(refusalsName, refusalsName+".1")
	}
	f, err := rootfs.Open(root, refusalsName, os.O_WRONLY|os.O_APPEND|os.O_CREATE, FilePerm)
	if err != nil {
		return
	}
	_, _ = f.Write(append(line, '\n'))
	_ = f.Close()
}

// LastRefusal is the task's most recent refusal, if any.
func (s *Store) LastRefusal(task string) *record.Refusal {
	root, err := s.openRoot()
	if err != nil {
		return nil
	}
	for _, name := range []string{refusalsName, refusalsName + ".1"} {
		data, err := rootfs.ReadFile(root, name, 2*refusalsLogLimit)
		if err != nil {
			continue
		}
		lines := bytes.Split(data, []byte{'\n'})
		for i := len(lines) - 1; i >= 0; i-- {
			var r record.Refusal
			if json.Unmarshal(lines[i], &r) == nil && r.Task == task {
				return &r
			}
		}
	}
	return nil
}

// Quarantine: unreadable records moved aside, never deleted.

// QuarantineActive moves a file of the active set into quarantine/ next
// to a note that says why, and returns its new path. The caller holds the
// run's fence (or the file names no run).
func (s *Store) QuarantineActive(name, why string, now time.Time, host string) (string, error) {
	root, err := s.openRoot()
	if err != nil {
		return "", err
	}
	if err := root.Mkdir(quarantineDir, DirPerm); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("quarantine %s: %w", name, unwrapPath(err))
	}
	qdir, err := s.dir(quarantineDir)
	if err != nil {
		return "", fmt.Errorf("quarantine %s: %w", name, err)
	}
	defer qdir.Close()
	dest := name
	if _, err := qdir.Lstat(dest); err == nil {
		dest = fmt.Sprintf("%s.%d", dest, now.UnixNano())
	}
	note := fmt.Sprintf("quarantined at %s by crew recover (pid %d on %s)\noriginal path: %s\nreason: %s\n",
		now.Format(time.RFC3339), os.Getpid(), host, s.display(activeDir, name), why)
	if err := writeFile(qdir, dest+".why", []byte(note), durable); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", name, unwrapPath(err))
	}
	if err := root.Rename(activeDir+"/"+name, quarantineDir+"/"+dest); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", name, unwrapPath(err))
	}
	if err := syncDir(qdir); err != nil {
		return "", err
	}
	active, err := s.dir(activeDir)
	if err != nil {
		return "", err
	}
	defer active.Close()
	return s.display(quarantineDir, dest), syncDir(active)
}

// ActiveFileExists reports whether name is still in the active set.
func (s *Store) ActiveFileExists(name string) bool {
	dir, err := s.dir(activeDir)
	if err != nil {
		return false
	}
	defer dir.Close()
	_, err = dir.Lstat(name)
	return err == nil
}
