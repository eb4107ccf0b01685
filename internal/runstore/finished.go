package runstore

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runlog"
	"github.com/crew-dev/crew/internal/stateroot"
)

// FinishedSize is the bytes a finished run takes: its record and its log.
func (s records) FinishedSize(id record.RunID) int64 {
	var n int64
	if dir, err := s.dir(shardDir(id)); err == nil {
		if fi, _, err := stateroot.StatRecord(dir, id); err == nil {
			n += fi.Size()
		}
		dir.Close()
	}
	if logs, err := s.logs.Sizer(); err == nil {
		if size, ok := logs.Head(id); ok {
			n += size
		}
		logs.Close()
	}
	return n + s.logs.TailBytes(id)
}

// RemoveFinished deletes a finished run: its log first (the pieces of a
// capped log's tail, then the log), then its record, so that a removal cut
// short leaves a record (which the next prune takes) rather than a log
// that nothing refers to. A run whose active file still exists (a
// finalization cut short), or whose log a waiter holds (see HoldLog), is
// not touched: ErrRunBusy.
func (s records) RemoveFinished(id record.RunID) error {
	// Fail closed: if the active set cannot be read (a link or a file
	// where its directory belongs), nothing is removed.
	active, err := s.layout(activeDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove run %s: %w", id, err)
	}
	if err == nil {
		if _, lerr := findRecord(active, id); lerr == nil {
			return ErrRunBusy
		}
	}
	held, err := s.logs.LockToRemove(id)
	if errors.Is(err, runlog.ErrBusy) {
		return ErrRunBusy
	}
	if err != nil {
		return err
	}
	if held != nil {
		defer held.Release() // until the record is gone: a waiter locks, then reads
	}
	if err := s.logs.Remove(id); err != nil {
		return err
	}
	failpoint.Hit(failpoint.PruneLogRemoved)
	dir, err := s.dir(shardDir(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		defer dir.Close()
		for _, name := range stateroot.RecordNames(id) {
			if err = removeFile(dir, name); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("remove run %s: %w", id, unwrapPath(err))
	}
	return nil
}

// RemoveShardIfEmpty removes the shard of id if it holds nothing any more
// (a run finishing into it meanwhile keeps it), and syncs runs/done.
func (s records) RemoveShardIfEmpty(shard string) {
	done, err := s.layout(doneDir)
	if err != nil {
		return
	}
	if done.Remove(shard) == nil {
		_ = syncDir(done)
	}
}

// Shard is the shard a run's finished record lives in.
func Shard(id record.RunID) string { return id.Shard() }

// DonePath is the path of a run's finished record, for messages.
func (s records) DonePath(id record.RunID) string {
	name := recordName(id)
	if dir, err := s.dir(shardDir(id)); err == nil {
		if found, err := findRecord(dir, id); err == nil {
			name = found
		}
		dir.Close()
	}
	return s.display(shardDir(id), name)
}

// ActivePath is the path of a run's active record, for messages.
func (s records) ActivePath(id record.RunID) string {
	name := recordName(id)
	if dir, err := s.layout(activeDir); err == nil {
		if found, err := findRecord(dir, id); err == nil {
			name = found
		}
	}
	return s.display(activeDir, name)
}

// RecordNeverAdmitted makes rec, the final record of a start that left
// the queue without a run (record.Run.NeverAdmitted), durable among the
// finished runs, and indexes it. It never held a slot and has no active
// file, and its id is its ticket's, which no run but its own waiter's
// could take: there is nothing to fence. An entry the index could not
// take is added by crew recover's check of the index, as for any finished
// record the index lacks; the record itself is read by id meanwhile.
func (s records) RecordNeverAdmitted(rec *record.Run) error {
	if !rec.NeverAdmitted || rec.State.Active() {
		return fmt.Errorf("run %s: not the final record of a start that never ran", rec.RunID)
	}
	if err := s.writeDone(rec); err != nil {
		return err
	}
	s.index.Append(rec)
	return nil
}
