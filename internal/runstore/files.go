package runstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
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
		err = s.replaceFile(ownersDir, dir, stopRequestName(id), b, durable)
	}
	if err != nil {
		return fmt.Errorf("record the stop request for run %s: %w", id, unwrapPath(err))
	}
	return nil
}

// ReadStopRequest returns the run's stop request, with who wrote it as
// the kernel says (FileUID), or nil if there is none or it cannot be read.
// Whoever acts on it checks that writer first (StopRequest.Requester).
func (s *Store) ReadStopRequest(id record.RunID) *record.StopRequest {
	dir, err := s.dir(ownersDir)
	if err != nil {
		return nil
	}
	defer dir.Close()
	r, _, err := readStopRequest(dir, id)
	if err != nil {
		return nil
	}
	return r
}

// maxStopRequestBytes bounds a stop request file.
const maxStopRequestBytes = 64 << 10

// readStopRequest reads run id's stop request in owners/ (dir) and sets
// its FileUID from fstat on the descriptor it was read through: the
// kernel's word for who wrote what was read, which the content cannot
// change. It returns that fstat too (nil if nothing was read).
func readStopRequest(dir *os.Root, id record.RunID) (*record.StopRequest, os.FileInfo, error) {
	name := stopRequestName(id)
	data, fi, err := rootfs.ReadFileStat(dir, name, maxStopRequestBytes)
	if err != nil {
		return nil, nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fi, fmt.Errorf("stop request %s: the file system names no owner for it", name)
	}
	r, err := record.DecodeStopRequest(data)
	if err != nil {
		return nil, fi, err
	}
	uid := int(st.Uid)
	r.FileUID = &uid
	return r, fi, nil
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

// Refusals: refusals.log, one JSON line per refused start.

// refusalsLogLimit bounds refusals.log; past it the log starts over, so
// recording a refusal stays one small append.
const refusalsLogLimit = 1 << 20

// AppendRefusal appends a refusal: one O_APPEND write of one line, no
// fsync. It is a diagnostic, not a record, and must never slow admission.
// Anything but a regular file with one link at refusals.log (a planted
// link, FIFO or directory) is moved aside into quarantine/ first.
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
	f, err := s.openInPlace(".", root, refusalsName, os.O_WRONLY|os.O_APPEND|os.O_CREATE, "crew start")
	if err != nil {
		return
	}
	_, _ = f.Write(append(line, '\n'))
	_ = f.Close()
}

// openInPlace opens a file crew writes in place (the refusal log, the
// admission holder note). If something other than a regular file with one
// link is at the name, it is moved aside into quarantine/ with a note and
// a fresh file is made: a planted link or FIFO is never written through,
// and never keeps crew from working.
func (s *Store) openInPlace(rel string, dir *os.Root, name string, flag int, by string) (*os.File, error) {
	f, err := rootfs.Open(dir, name, flag, s.filePerm())
	var notRegular *rootfs.NotRegularError
	var linked *rootfs.LinkedError
	if !errors.As(err, &notRegular) && !errors.As(err, &linked) {
		return f, err
	}
	why := fmt.Sprintf("%v; crew writes this file in place, so it moved it aside and made a fresh one", err)
	if _, qerr := s.quarantine(rel, name, why, by); qerr != nil {
		return nil, errors.Join(err, qerr)
	}
	return rootfs.Open(dir, name, flag|os.O_EXCL, s.filePerm())
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
	return s.quarantineAt(activeDir, name, why, "crew recover", now, host)
}

// quarantine moves name (of any type: a link is moved, never followed)
// from the layout directory rel ("." for the root) into quarantine/, next
// to a note that says why, and returns its new path.
func (s *Store) quarantine(rel, name, why, by string) (string, error) {
	host, _ := os.Hostname()
	return s.quarantineAt(rel, name, why, by, time.Now(), host)
}

func (s *Store) quarantineAt(rel, name, why, by string, now time.Time, host string) (string, error) {
	root, err := s.openRoot()
	if err != nil {
		return "", err
	}
	if err := s.mkdir(root, quarantineDir); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("quarantine %s: %w", name, unwrapPath(err))
	}
	qdir, err := s.dir(quarantineDir)
	if err != nil {
		return "", fmt.Errorf("quarantine %s: %w", name, err)
	}
	defer qdir.Close()
	from, done, err := s.dirOrRoot(rel)
	if err != nil {
		return "", fmt.Errorf("quarantine %s: %w", name, err)
	}
	defer done()
	dest := name
	if _, err := qdir.Lstat(dest); err == nil {
		dest = fmt.Sprintf("%s.%d", dest, now.UnixNano())
	}
	note := fmt.Sprintf("quarantined at %s by %s (pid %d on %s)\noriginal path: %s\nreason: %s\n",
		now.Format(time.RFC3339), by, os.Getpid(), host, s.display(rel, name), why)
	if err := writeFileMode(qdir, dest+".why", []byte(note), durable, s.filePerm()); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", name, unwrapPath(err))
	}
	if err := renameBetween(from, name, qdir, dest); err != nil {
		_ = removeFile(qdir, dest+".why")
		return "", fmt.Errorf("quarantine %s: %w", s.display(rel, name), err)
	}
	if err := syncDir(qdir); err != nil {
		return "", err
	}
	return s.display(quarantineDir, dest), syncDir(from)
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
