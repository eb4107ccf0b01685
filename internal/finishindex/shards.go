package finishindex

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/stateroot"
)

// Finished runs live in runs/done/<shard>/, one shard per creation hour.
// This file is the one walk over them.

// Shards lists the shards of finished runs (their creation hours), oldest
// first.
func (ix *Index) Shards() ([]string, error) {
	dir, err := ix.done.Open()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list finished runs: %w", err)
	}
	defer dir.Close()
	names, err := ix.done.List(dir)
	if err != nil {
		return nil, fmt.Errorf("list finished runs in %s: %w", ix.done.Path(), stateroot.UnwrapPath(err))
	}
	names = slices.DeleteFunc(names, stateroot.IsTempName)
	slices.Sort(names)
	return names, nil
}

// shardNames lists the record names of one shard, unsorted.
func (ix *Index) shardNames(shard string) ([]string, error) {
	names, _, err := ix.shardNamesUpTo(shard, -1)
	return names, err
}

// shardNamesUpTo lists at most limit+1 record names of one shard (all of
// them if limit < 0), unsorted; complete says whether that was all. A
// crowded hour (100,000 runs) costs what is read of it: the rest of the
// directory is not read at all.
func (ix *Index) shardNamesUpTo(shard string, limit int) (names []string, complete bool, err error) {
	dir, err := ix.done.Open(shard)
	if err != nil {
		return nil, false, fmt.Errorf("list finished runs in %s: %w", ix.done.Path(shard), err)
	}
	defer dir.Close()
	if limit < 0 {
		names, err = ix.done.List(dir)
		complete = true
	} else {
		names, complete, err = ix.done.ListSome(dir, limit+1)
	}
	if err != nil {
		return nil, false, fmt.Errorf("list finished runs in %s: %w", ix.done.Path(shard), stateroot.UnwrapPath(err))
	}
	return slices.DeleteFunc(names, func(n string) bool {
		_, ok := stateroot.CutRecordName(n)
		return !ok || stateroot.IsTempName(n)
	}), complete, nil
}

// walkFirst is how many of a shard's newest runs WalkFinished picks
// without sorting the shard: most walks (status, resolving a task) want a
// few of the newest.
const walkFirst = 64

// WalkFinished calls fn with finished run ids, newest first (run ids sort
// by creation), until fn returns false. Its cost follows how far back it
// has to go, not the whole history.
func (ix *Index) WalkFinished(fn func(id record.RunID) bool) error {
	shards, err := ix.Shards()
	if err != nil {
		return err
	}
	for i := len(shards) - 1; i >= 0; i-- {
		names, err := ix.shardNames(shards[i])
		var notDir *stateroot.NotDirError
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
			if !fn(stateroot.RecordID(order[j])) {
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
func (ix *Index) RecentFinished(n int, keep func(*record.Run) bool) (recs []*record.Run, bad []error, err error) {
	if n <= 0 {
		return nil, nil, nil
	}
	err = ix.WalkFinished(func(id record.RunID) bool {
		rec, err := ix.recs.ReadDone(id)
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
