package finishindex

import (
	"os"
	"time"
)

// What the tests (package finishindex_test, which makes whole state roots
// with package runstore) look at inside.

const (
	FinishedIdxHeader = finishedIdxHeader
	FinishedIdxName   = finishedIdxName
	IndexCompactFrom  = indexCompactFrom
	MaxEntryBytes     = maxEntryBytes
	IndexName         = indexName
	IndexHeader       = indexHeader
)

type (
	FinishedEntry = finishedEntry
	RawEntry      = rawEntry
	IndexWalk     = indexWalk
)

var (
	ExitCodes          = &exitCodes
	EntryOf            = entryOf
	ParseEntry         = parseEntry
	ReadIndex          = readIndex
	OutOfOrder         = outOfOrder
	CrossesCompactSize = crossesCompactSize
	NewestN            = newestN
	WalkFirst          = walkFirst
)

func (e finishedEntry) Encode(b []byte) []byte { return e.encode(b) }

func (w *indexWalk) Walk(f *os.File, size int64, visit func(r rawEntry) bool, ends func(stamp time.Time) bool) error {
	return w.walk(f, size, visit, ends)
}

func (ix *Index) OpenIndex() (f *os.File, size int64, why error) { return ix.openIndex() }

// OpenRuns opens runs/, where the indexes are.
func (ix *Index) OpenRuns() (*os.Root, error) { return ix.runs.Open() }

func (ix *Index) AppendFinished(dir *os.Root, entries []finishedEntry) (ok, compact bool) {
	return ix.appendFinished(dir, entries)
}

func (ix *Index) CompactOpen(f *os.File, size int64) (dropped int, err error) {
	return ix.compactIndex(f, size)
}

func (ix *Index) ReplaceIndex(dir *os.Root, old *os.File, size int64, content []byte) error {
	return ix.replaceIndex(dir, old, size, content)
}

// Cached is the done index's entry of a shard, if it still describes it.
func (x *DoneIndex) Cached(shard string) (ShardStats, bool) {
	e, ok := x.cached(shard)
	return e.ShardStats, ok
}

// Mtime is the modification time the done index remembers of a shard.
func (x *DoneIndex) Mtime(shard string) int64 { return x.entries[shard].mtime }
