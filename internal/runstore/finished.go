package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runlog"
)

// Finished runs live in runs/done/<shard>/, one shard per creation hour.
// This file is the one walk over them.

// doneShards lists the shards, oldest first.
func (s *Store) doneShards() ([]string, error) {
	dir, err := s.dir(doneDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list finished runs: %w", err)
	}
	defer dir.Close()
	names, err := listNames(dir)
	if err != nil {
		return nil, fmt.Errorf("list finished runs in %s: %w", s.display(doneDir), unwrapPath(err))
	}
	names = slices.DeleteFunc(names, IsTempName)
	slices.Sort(names)
	return names, nil
}

// shardNames lists the record names of one shard, unsorted.
func (s *Store) shardNames(shard string) ([]string, error) {
	names, _, err := s.shardNamesUpTo(shard, -1)
	return names, err
}

// shardNamesUpTo lists at most limit+1 record names of one shard (all of
// them if limit < 0), unsorted; complete says whether that was all. A
// crowded hour (100,000 runs) costs what is read of it: the rest of the
// directory is not read at all.
func (s *Store) shardNamesUpTo(shard string, limit int) (names []string, complete bool, err error) {
	dir, err := s.dir(doneDir + "/" + shard)
	if err != nil {
		return nil, false, fmt.Errorf("list finished runs in %s: %w", s.display(doneDir, shard), err)
	}
	defer dir.Close()
	if limit < 0 {
		names, err = listNames(dir)
		complete = true
	} else {
		names, complete, err = listSomeNames(dir, limit+1)
	}
	if err != nil {
		return nil, false, fmt.Errorf("list finished runs in %s: %w", s.display(doneDir, shard), unwrapPath(err))
	}
	return slices.DeleteFunc(names, func(n string) bool {
		idStr, ok := strings.CutSuffix(n, ".json")
		return !ok || IsTempName(n) || !record.LooksLikeRunID(idStr)
	}), complete, nil
}

// walkFirst is how many of a shard's newest runs WalkFinished picks
// without sorting the shard: most walks (status, resolving a task) want a
// few of the newest.
const walkFirst = 64

// WalkFinished calls fn with finished run ids, newest first (run ids sort
// by creation), until fn returns false. Its cost follows how far back it
// has to go, not the whole history.
func (s *Store) WalkFinished(fn func(id record.RunID) bool) error {
	shards, err := s.doneShards()
	if err != nil {
		return err
	}
	for i := len(shards) - 1; i >= 0; i-- {
		names, err := s.shardNames(shards[i])
		var notDir *NotDirError
		if errors.Is(err, fs.ErrNotExist) || errors.As(err, &notDir) {
			continue // pruned meanwhile, or a stray file: no finished runs there
		}
		if err != nil {
			return err
		}
		order := newestN(names, walkFirst)
		for j := 0; j < len(names); j++ {
			if j == len(order) {
				slices.Sort(names)
				slices.Reverse(names)
				order = names
			}
			if !fn(record.RunID(strings.TrimSuffix(order[j], ".json"))) {
				return nil
			}
		}
	}
	return nil
}

// newestN returns the k largest names (run ids sort by creation time),
// largest first, in O(len(names)·log k) comparisons.
func newestN(names []string, k int) []string {
	if k >= len(names) {
		out := slices.Clone(names)
		slices.Sort(out)
		slices.Reverse(out)
		return out
	}
	top := make([]string, 0, k+1) // kept sorted, largest first
	for _, name := range names {
		if len(top) == k && name <= top[k-1] {
			continue
		}
		i, _ := slices.BinarySearchFunc(top, name, func(a, b string) int { return strings.Compare(b, a) })
		top = slices.Insert(top, i, name)
		if len(top) > k {
			top = top[:k]
		}
	}
	return top
}

// RecentFinished returns up to n finished records, newest first, for which
// keep returns true (all, if keep is nil). Unreadable records are returned
// in bad.
func (s *Store) RecentFinished(n int, keep func(*record.Run) bool) (recs []*record.Run, bad []error, err error) {
	if n <= 0 {
		return nil, nil, nil
	}
	err = s.WalkFinished(func(id record.RunID) bool {
		rec, err := s.ReadDone(id)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			bad = append(bad, err)
		case keep == nil || keep(rec):
			recs = append(recs, rec)
		}
		return len(recs) < n
	})
	return recs, bad, err
}

// FinishedSize is the bytes a finished run takes: its record and its log.
func (s *Store) FinishedSize(id record.RunID) int64 {
	var n int64
	if dir, err := s.dir(shardDir(id)); err == nil {
		if fi, err := dir.Lstat(recordName(id)); err == nil {
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
func (s *Store) RemoveFinished(id record.RunID) error {
	// Fail closed: if the active set cannot be read (a link or a file
	// where its directory belongs), nothing is removed.
	active, err := s.dir(activeDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove run %s: %w", id, err)
	}
	if err == nil {
		_, lerr := active.Lstat(recordName(id))
		active.Close()
		if lerr == nil {
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
		err = removeFile(dir, recordName(id))
	}
	if err != nil {
		return fmt.Errorf("remove run %s: %w", id, unwrapPath(err))
	}
	return nil
}

// RemoveShardIfEmpty removes the shard of id if it holds nothing any more
// (a run finishing into it meanwhile keeps it), and syncs runs/done.
func (s *Store) RemoveShardIfEmpty(shard string) {
	done, err := s.dir(doneDir)
	if err != nil {
		return
	}
	defer done.Close()
	if done.Remove(shard) == nil {
		_ = syncDir(done)
	}
}

// Shard is the shard a run's finished record lives in.
func Shard(id record.RunID) string { return id.Shard() }

// DonePath is the path of a run's finished record, for messages.
func (s *Store) DonePath(id record.RunID) string { return s.display(shardDir(id), recordName(id)) }

// ActivePath is the path of a run's active record, for messages.
func (s *Store) ActivePath(id record.RunID) string { return s.display(activeDir, recordName(id)) }
