package runstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
)

// Stop requests: owners/<run-id>.stop, until the run is final.

func stopRequestName(id record.RunID) string { return string(id) + ".stop" }

// WriteStopRequest durably records who asked to stop a run, before any
// signal is sent, so whoever finalizes it can say so.
func (s stops) WriteStopRequest(id record.RunID, r *record.StopRequest) error {
	named := *r
	named.RunID = id
	b, err := named.Encode()
	if err != nil {
		return err
	}
	dir, err := s.layout(ownersDir)
	if err == nil {
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
func (s stops) ReadStopRequest(id record.RunID) *record.StopRequest {
	dir, err := s.layout(ownersDir)
	if err != nil {
		return nil
	}
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
	if r.RunID != "" && r.RunID != id {
		return nil, fi, fmt.Errorf("stop request %s was written for run %s: moved here from that run's name, it asks nothing of run %s", name, r.RunID, id)
	}
	uid := int(st.Uid)
	r.FileUID = &uid
	return r, fi, nil
}

// RemoveStopRequest removes the run's stop request, if any.
func (s stops) RemoveStopRequest(id record.RunID) error {
	dir, err := s.layout(ownersDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
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
