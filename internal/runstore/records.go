package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
	"github.com/crew-dev/crew/internal/slotrec"
	"github.com/crew-dev/crew/internal/stateroot"
)

// MaxRecordBytes bounds a run record. A record is a few kilobytes; a file
// over the limit is unreadable, never read, so no file in the active set
// can make admission slow or exhaust memory inside the admission lock.
const MaxRecordBytes = 1 << 20

// ListActive reads every record in the active set, each decoded once. Its
// cost is O(active runs), whatever the history.
func (s records) ListActive() ([]backend.ActiveEntry, error) {
	dir, err := s.layout(activeDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list active runs: %w", err)
	}
	names, err := listNames(dir)
	if err != nil {
		return nil, fmt.Errorf("list active runs in %s: %w", s.display(activeDir), unwrapPath(err))
	}
	out := make([]backend.ActiveEntry, 0, len(names))
	for _, name := range names {
		if stateroot.IsTempName(name) {
			continue
		}
		out = append(out, s.readActive(dir, name))
	}
	return out, nil
}

func (s records) readActive(dir *os.Root, name string) backend.ActiveEntry {
	ent := backend.ActiveEntry{Name: name, Path: s.display(activeDir, name)}
	id, ok := stateroot.CutRecordName(name)
	if !ok {
		ent.Err = foreignActive(ent.Path)
		return ent
	}
	ent.ID = id
	if s.IsDone(ent.ID) {
		ent.Finished = true
		return ent
	}
	rec, err := s.readRecord(dir, name, ent.Path)
	if errors.Is(err, fs.ErrNotExist) {
		// Finalized (moved out) since the directory was read: it is no
		// longer part of the active set.
		ent.Finished = true
		return ent
	}
	if err != nil {
		ent.Err = err
		return ent
	}
	if rec.RunID != ent.ID {
		ent.Err = fmt.Errorf("run record %s: says runId %s, but its file name says %s", ent.Path, rec.RunID, ent.ID)
		return ent
	}
	ent.Rec = rec
	// A final record still in the active set: a finish whose move into
	// runs/done was cut short. It holds no slot.
	ent.Finished = !rec.State.Active()
	return ent
}

// foreignActive is the error for a file in the active set that is not a
// run's record.
func foreignActive(path string) error {
	return fmt.Errorf("foreign file %s in the active set: not <run-id>%s (nor <run-id>%s)", path, stateroot.RecordExt, stateroot.V1RecordExt)
}

// readRecord reads and decodes one record file; errors name the file.
func (s records) readRecord(dir *os.Root, name, display string) (*record.Run, error) {
	data, err := rootfs.ReadFile(dir, name, MaxRecordBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read run record %s: %w", display, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("run record %s: %w", display, unwrapPath(err))
	}
	rec, err := decodeRecord(data)
	if err != nil {
		return nil, fmt.Errorf("run record %s: %w", display, err)
	}
	return rec, nil
}

// ReadActive reads a run's record in the active set.
func (s records) ReadActive(id record.RunID) (*record.Run, error) {
	dir, err := s.layout(activeDir)
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", id, err)
	}
	name, err := findRecord(dir, id)
	if err != nil {
		return nil, fmt.Errorf("read run record %s: %w", s.display(activeDir, recordName(id)), fs.ErrNotExist)
	}
	return s.readRecord(dir, name, s.display(activeDir, name))
}

// ReadDone reads a run's finished record.
func (s records) ReadDone(id record.RunID) (*record.Run, error) {
	shard := shardDir(id)
	dir, err := s.dir(shard)
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", id, err)
	}
	defer dir.Close()
	name, err := findRecord(dir, id)
	if err != nil {
		return nil, fmt.Errorf("read run record %s: %w", s.display(shard, recordName(id)), fs.ErrNotExist)
	}
	return s.readRecord(dir, name, s.display(shard, name))
}

// ReadRun finds a run's record: the finished one if it exists, else the
// active one.
func (s records) ReadRun(id record.RunID) (*record.Run, error) {
	rec, err := s.ReadDone(id)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return rec, err
	}
	rec, err = s.ReadActive(id)
	if errors.Is(err, fs.ErrNotExist) {
		// It may have been finalized between the two reads.
		if rec, err2 := s.ReadDone(id); err2 == nil {
			return rec, nil
		}
		return nil, fmt.Errorf("no run %s in %s: %w", id, s.path, fs.ErrNotExist)
	}
	return rec, err
}

// IsDone reports whether the run has a finished record.
func (s records) IsDone(id record.RunID) bool {
	dir, err := s.dir(shardDir(id))
	if err != nil {
		return false
	}
	defer dir.Close()
	_, err = findRecord(dir, id)
	return err == nil
}

// writeActive writes rec into the active set as a JSON record: for a run
// an older crew reserved (<id>.json), which is kept in its own format.
func (s records) writeActive(rec *record.Run, how durability) error {
	b, err := rec.Encode()
	if err != nil {
		return err
	}
	dir, err := s.layout(activeDir)
	if err == nil {
		err = s.replaceFile(activeDir, dir, stateroot.V1RecordName(rec.RunID), b, how)
	}
	if err != nil {
		return fmt.Errorf("record run %s as %s in %s: %w", rec.RunID, rec.State, s.display(activeDir), unwrapPath(err))
	}
	return nil
}

// UpdateActive replaces an active JSON record (<id>.json, as a crew of
// version 1 kept it) atomically but without the directory fsync, as that
// crew recorded provisioning → running. A run of this crew is updated in
// its record file (RunLocks.Update); this is how tests make the runs of an
// older crew.
func (s records) UpdateActive(rec *record.Run) error {
	return s.writeActive(rec, atomic)
}

// writeDone durably writes a final record among the finished runs. Until
// removeActive runs, the run's stale active record still exists; every
// reader treats an active record whose finished record exists as finished
// (see ActiveEntry.Finished), so the two never disagree.
func (s records) writeDone(rec *record.Run) error {
	if rec.State.Active() {
		return fmt.Errorf("write finished record of run %s: state %s is not final", rec.RunID, rec.State)
	}
	shard := shardDir(rec.RunID)
	if err := failpoint.Error(failpoint.FinishWrite); err != nil {
		return fmt.Errorf("record run %s as %s in %s: %w", rec.RunID, rec.State, s.display(shard), err)
	}
	payload, err := rec.Encode()
	if err != nil {
		return err
	}
	b, err := slotrec.Encode(payload, 1, 0)
	if err != nil {
		return err
	}
	// crew prune removes empty shard directories; if it removes this one
	// between our mkdir and our write, make it again.
	for attempt := 0; ; attempt++ {
		dir, err := s.ensureShard(shard)
		if err == nil {
			err = s.replaceFile(shard, dir, recordName(rec.RunID), b, durable)
			dir.Close()
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == 2 {
			return fmt.Errorf("record run %s as %s in %s: %w", rec.RunID, rec.State, s.display(shard), unwrapPath(err))
		}
	}
}

// ensureShard opens a finished-run shard, creating it (durably) if needed.
func (s records) ensureShard(shard string) (*os.Root, error) {
	dir, err := s.dir(shard)
	if !errors.Is(err, fs.ErrNotExist) {
		return dir, err
	}
	done, err := s.layout(doneDir)
	if err != nil {
		return nil, err
	}
	if err := s.mkdir(done, path.Base(shard)); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	if err := syncDir(done); err != nil {
		return nil, err
	}
	return s.dir(shard)
}

// removeActive takes a finalized run out of the active set (under either
// name). No directory fsync: if the removal is lost in a power loss, the
// stale active record comes back next to its finished record, and is
// treated as finished.
func (s records) removeActive(id record.RunID) error {
	dir, err := s.layout(activeDir)
	if err == nil {
		var name string
		if name, err = findRecord(dir, id); err == nil {
			err = removeFile(dir, name)
		} else if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("remove run %s from the active set: %w", id, unwrapPath(err))
	}
	return nil
}

// finish makes a run's final record durable among the finished runs and
// takes it out of the active set: the steps every finalizer (the run's own
// supervisor, a recoverer, crew stop) takes while holding the run's locks.
func (s records) finish(rec *record.Run) error {
	if err := s.writeDone(rec); err != nil {
		return err
	}
	failpoint.Hit(failpoint.Finalized)
	return s.indexAndLeave(rec)
}

// indexAndLeave adds a run whose final record is durable to the index of
// finished runs, then takes it out of the active set. If the entry cannot
// be written (nor the index taken out of use), the active file stays: a
// finished leftover, which holds no slot, which readers add to what the
// index says, and whose finalizer (the next admission, crew recover)
// indexes it.
func (s records) indexAndLeave(rec *record.Run) error {
	if !s.index.Append(rec) {
		return s.RemoveStopRequest(rec.RunID)
	}
	return s.leaveActive(rec.RunID)
}

// leaveActive takes a run whose final record is durable out of the active
// set, and its stop request with it.
func (s records) leaveActive(id record.RunID) error {
	if err := s.removeActive(id); err != nil {
		return err
	}
	return s.RemoveStopRequest(id)
}

func shardDir(id record.RunID) string { return doneDir + "/" + id.Shard() }

// ActiveFileExists reports whether name is still in the active set.
func (s records) ActiveFileExists(name string) bool {
	dir, err := s.layout(activeDir)
	if err != nil {
		return false
	}
	_, err = dir.Lstat(name)
	return err == nil
}
