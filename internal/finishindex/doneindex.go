package finishindex

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
	"github.com/crew-dev/crew/internal/stateroot"
)

// The done index, runs/done.index, remembers for each shard of finished
// runs how many records it holds and what they and their logs take, so
// that retention (how many finished runs are there, and which are the
// oldest) and status (how big is the state root) need not list and stat
// the whole history every time.
//
// It is a cache, never a source of truth: an entry is used only while the
// shard directory still has the inode and modification time it had when
// it was counted (adding or removing a record changes the time), and an
// entry is stored only for a shard whose modification time was already
// settled (older than indexSettle) when it was counted, so that a change
// within the same timestamp tick cannot hide behind it. A missing,
// unreadable or foreign index is ignored and rebuilt; deleting it is
// always safe. It is written atomically without fsync (after a crash it
// may be old or absent, which the checks above make harmless), and only
// when something in it changed.
//
// One line per shard: "<shard> <mtime-ns> <inode> <runs> <record-bytes>
// <log-files> <log-bytes>", log-bytes -1 when only counted, not measured.

const (
	indexName = "done.index"
	// indexSettle is how old a shard's modification time must be before
	// its count is remembered.
	indexSettle = 2 * time.Second
	// maxIndexBytes bounds the index; a larger one is ignored.
	maxIndexBytes = 16 << 20
	indexHeader   = "crew done index v1\n"
)

// ShardStats is what a shard of finished runs holds.
type ShardStats struct {
	Runs        int
	RecordBytes int64
	// LogFiles is how many of the runs have a log, and LogBytes what the
	// logs take (head and pieces); LogBytes is -1 if not measured.
	LogFiles int
	LogBytes int64
}

type indexEntry struct {
	mtime int64
	ino   uint64
	ShardStats
}

// DoneIndex is the done index of one operation (a prune, a status): load
// it, ask, and Save what was learnt.
type DoneIndex struct {
	ix      *Index
	now     func() time.Time
	entries map[string]indexEntry
	dirty   bool
	shards  []string
	done    *os.Root
	// listed memoizes shard listings for the operation's length: what it
	// removes meanwhile, it removes through Drop.
	listed map[string][]record.RunID
	// measured is how many runs Count has measured.
	measured int
}

// OpenDoneIndex reads the index (an unusable one counts as empty).
func (ix *Index) OpenDoneIndex(now func() time.Time) *DoneIndex {
	x := &DoneIndex{ix: ix, now: now, entries: map[string]indexEntry{}}
	dir, err := ix.runs.Open()
	if err != nil {
		return x
	}
	defer dir.Close()
	data, err := rootfs.ReadFile(dir, indexName, maxIndexBytes)
	if err != nil || !bytes.HasPrefix(data, []byte(indexHeader)) {
		return x
	}
	sc := bufio.NewScanner(bytes.NewReader(data[len(indexHeader):]))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 7 {
			continue
		}
		var e indexEntry
		var err error
		var runs, logFiles int64
		e.mtime, err = strconv.ParseInt(f[1], 10, 64)
		if err == nil {
			e.ino, err = strconv.ParseUint(f[2], 10, 64)
		}
		if err == nil {
			runs, err = strconv.ParseInt(f[3], 10, 32)
		}
		if err == nil {
			e.RecordBytes, err = strconv.ParseInt(f[4], 10, 64)
		}
		if err == nil {
			logFiles, err = strconv.ParseInt(f[5], 10, 32)
		}
		if err == nil {
			e.LogBytes, err = strconv.ParseInt(f[6], 10, 64)
		}
		if err != nil || runs < 0 || logFiles < 0 {
			continue
		}
		e.Runs, e.LogFiles = int(runs), int(logFiles)
		x.entries[f[0]] = e
	}
	return x
}

// Shards lists the shards of finished runs, oldest first (listed once per
// DoneIndex).
func (x *DoneIndex) Shards() ([]string, error) {
	if x.shards != nil {
		return x.shards, nil
	}
	shards, err := x.ix.Shards()
	if err != nil {
		return nil, err
	}
	x.shards = shards
	if x.shards == nil {
		x.shards = []string{}
	}
	return x.shards, nil
}

// Close releases the index's handle on runs/done.
func (x *DoneIndex) Close() {
	if x.done != nil {
		x.done.Close()
		x.done = nil
	}
}

// shardState is what the shard directory looks like now: its inode and
// modification time (zero if it cannot be told). runs/done is opened once
// per DoneIndex: a DoneIndex lives for one short operation.
func (x *DoneIndex) shardState(shard string) (mtime int64, ino uint64) {
	if x.done == nil {
		done, err := x.ix.done.Open()
		if err != nil {
			return 0, 0
		}
		x.done = done
	}
	fi, err := x.done.Lstat(shard)
	if err != nil || !fi.IsDir() {
		return 0, 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0
	}
	return fi.ModTime().UnixNano(), uint64(st.Ino)
}

// lookup is the shard's state now, and its entry if that still describes
// the shard.
type lookup struct {
	mtime int64
	ino   uint64
	entry indexEntry
	valid bool
}

func (x *DoneIndex) lookup(shard string) lookup {
	mtime, ino := x.shardState(shard)
	e, ok := x.entries[shard]
	return lookup{mtime: mtime, ino: ino, entry: e, valid: ok && mtime != 0 && e.mtime == mtime && e.ino == ino}
}

// cached is the shard's entry if it still describes the shard.
func (x *DoneIndex) cached(shard string) (indexEntry, bool) {
	l := x.lookup(shard)
	return l.entry, l.valid
}

// remember stores what was counted in a shard whose state was l before
// the count, if that state was settled; a shard that is not settled
// loses its entry.
func (x *DoneIndex) remember(shard string, l lookup, st ShardStats) {
	if !x.settled(l.mtime) {
		x.Forget(shard)
		return
	}
	if l.valid && l.entry.ShardStats == st {
		return
	}
	x.entries[shard] = indexEntry{mtime: l.mtime, ino: l.ino, ShardStats: st}
	x.dirty = true
}

// settled reports whether a shard modified at mtime would be remembered.
func (x *DoneIndex) settled(mtime int64) bool {
	return mtime != 0 && x.now().Sub(time.Unix(0, mtime)) >= indexSettle
}

// IDs lists a shard's finished runs, oldest first, and remembers how many
// there are. A shard that is gone (pruned meanwhile) has none.
func (x *DoneIndex) IDs(shard string) ([]record.RunID, error) {
	l := x.lookup(shard)
	ids, err := x.list(shard)
	slices.Sort(ids) // in place: the listing is cached in this order
	if err == nil && (!l.valid || l.entry.Runs != len(ids)) {
		x.remember(shard, l, ShardStats{Runs: len(ids), LogBytes: -1})
	}
	return ids, err
}

// list lists a shard's finished runs (once per DoneIndex), in no
// particular order: counting and sampling a crowded hour (what status's
// size does) need no sort of 100,000 names.
func (x *DoneIndex) list(shard string) ([]record.RunID, error) {
	ids, _, err := x.listUpTo(shard, -1)
	return ids, err
}

// listUpTo is list within a budget: a shard with more than limit runs
// (limit >= 0) is listed only that far, which complete (false) says, and
// that partial listing is not remembered.
func (x *DoneIndex) listUpTo(shard string, limit int) (ids []record.RunID, complete bool, err error) {
	if ids, ok := x.listed[shard]; ok {
		return ids, true, nil
	}
	names, complete, err := x.ix.shardNamesUpTo(shard, limit)
	var notDir *stateroot.NotDirError
	if errors.Is(err, fs.ErrNotExist) || errors.As(err, &notDir) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	ids = make([]record.RunID, len(names))
	for i, n := range names {
		ids[i] = stateroot.RecordID(n)
	}
	if !complete {
		return ids, false, nil
	}
	if x.listed == nil {
		x.listed = map[string][]record.RunID{}
	}
	x.listed[shard] = ids
	return ids, true, nil
}

// Drop tells the index a run was removed from its shard.
func (x *DoneIndex) Drop(id record.RunID) {
	sh := id.Shard()
	if ids, ok := x.listed[sh]; ok {
		x.listed[sh] = slices.DeleteFunc(slices.Clone(ids), func(r record.RunID) bool { return r == id })
	}
	x.Forget(sh)
}

// measureOnCount is the most runs the Counts of one DoneIndex measure
// (two or three stats each): the index learns the sizes of a big history
// a little at a time, never all at once in one finish.
const measureOnCount = 512

// Count is how many finished runs a shard holds: from the index if it
// still describes the shard, else by listing it. A shard counted once it
// has settled is measured too (when not too big), so that the index
// learns every shard's size once, when it is cheapest: when it has to be
// listed anyway.
func (x *DoneIndex) Count(shard string) (int, error) {
	l := x.lookup(shard)
	if l.valid {
		return l.entry.Runs, nil
	}
	measure := 0
	if x.settled(l.mtime) {
		measure = max(measureOnCount-x.measured, 0)
	}
	st, _, err := x.stats(shard, l, measure)
	if st.LogBytes >= 0 {
		x.measured += st.Runs
	}
	return st.Runs, err
}

// Stats is what a shard holds, its records' and logs' bytes included:
// from the index if it still describes the shard, else by listing the
// shard and, if it holds at most measureUpTo runs, stat-ing each record
// and log (fresh reports that work was done). A shard with more runs is
// only counted (LogBytes -1).
func (x *DoneIndex) Stats(shard string, measureUpTo int) (st ShardStats, fresh bool, err error) {
	return x.stats(shard, x.lookup(shard), measureUpTo)
}

func (x *DoneIndex) stats(shard string, l lookup, measureUpTo int) (st ShardStats, fresh bool, err error) {
	if l.valid && (l.entry.LogBytes >= 0 || l.entry.Runs > measureUpTo) {
		return l.entry.ShardStats, false, nil
	}
	ids, err := x.list(shard)
	if err != nil {
		return ShardStats{}, false, err
	}
	st = ShardStats{Runs: len(ids), LogBytes: -1}
	if len(ids) <= measureUpTo {
		st = x.measure(shard, ids)
	}
	if !l.valid || l.entry.ShardStats != st {
		x.remember(shard, l, st)
	}
	return st, true, nil
}

// measure stats each record of a shard and its log.
func (x *DoneIndex) measure(shard string, ids []record.RunID) ShardStats {
	st := ShardStats{Runs: len(ids)}
	dir, err := x.ix.done.Open(shard)
	if err != nil {
		return st
	}
	defer dir.Close()
	logs, lerr := x.ix.logs.Sizer()
	if lerr == nil {
		defer logs.Close()
	}
	for _, id := range ids {
		if fi, _, err := stateroot.StatRecord(dir, id); err == nil {
			st.RecordBytes += fi.Size()
		}
		if lerr != nil {
			continue
		}
		if size, ok := logs.Head(id); ok {
			st.LogFiles++
			st.LogBytes += size
		}
		if logs.HasTail(id) {
			st.LogBytes += x.ix.logs.TailBytes(id)
		}
	}
	return st
}

// Forget drops a shard's entry (before its records are removed).
func (x *DoneIndex) Forget(shard string) {
	if _, ok := x.entries[shard]; ok {
		delete(x.entries, shard)
		x.dirty = true
	}
}

// Save writes the index if something in it changed; entries of shards
// that no longer exist go. Failures are ignored: the index is a cache.
func (x *DoneIndex) Save() {
	if !x.dirty {
		return
	}
	shards, err := x.Shards()
	if err != nil {
		return
	}
	var b bytes.Buffer
	b.WriteString(indexHeader)
	for _, sh := range shards {
		if e, ok := x.entries[sh]; ok {
			fmt.Fprintf(&b, "%s %d %d %d %d %d %d\n", sh, e.mtime, e.ino, e.Runs, e.RecordBytes, e.LogFiles, e.LogBytes)
		}
	}
	dir, err := x.ix.runs.Open()
	if err != nil {
		return
	}
	defer dir.Close()
	if x.ix.runs.WriteFile(dir, indexName, b.Bytes()) == nil {
		x.dirty = false
	}
}
