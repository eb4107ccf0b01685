// Package finishindex keeps what a state root knows of its finished runs
// as a whole: the one walk over their records in runs/done/<hour>/
// (shards.go), the index of finished runs in the order they finished
// (runs/finished.idx: this file, read by indexscan.go, for the newest
// finishes of status and history, order.go, and retention's line, count.go),
// and what each shard holds (runs/done.index, doneindex.go, and the size
// status shows, size.go). The records themselves, the truth all of this is
// derived from, are package runstore's: it writes and reads them, and
// hands this package the handles of runs/ and runs/done/ (stateroot.Dir).
package finishindex

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/renameio/v2"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
	"github.com/crew-dev/crew/internal/runlog"
	"github.com/crew-dev/crew/internal/stateroot"
)

// The index of finished runs, runs/finished.idx, lists finished runs in the
// order their final records were written, so that "the newest finishes"
// (crew status, crew history) cost what they show, not the whole history:
// runs/done/ is sharded by creation hour, which says nothing about when a
// run finished, and one hour can hold 100,000 runs.
//
// It is derived data, never a second source of truth:
//
//   - Every reader reads the record of each run it shows; an entry whose
//     record is gone (pruned meanwhile) is skipped, and where the record
//     and its entry disagree the record wins.
//   - A run's entry is appended after its final record is durable and
//     before its active file goes (RunLocks.Finish). A crash in between
//     leaves a finished leftover in the active set, which every reader adds
//     to what the index says and whoever cleans it up (admission's reaping,
//     crew recover) indexes. So a run is always in the index or in the
//     active set; the one gap is an append lost to a power cut without a
//     journal that orders it (no fsync: see below), and crew recover
//     closes it.
//   - An index that is missing, unreadable or of an unknown version is not
//     used: readers fall back to the records themselves (ordered by the
//     files' modification times, newest first, which is never earlier than
//     the finish the record holds), and crew recover rebuilds it from them.
//     An append that fails (a full disk) removes the index rather than leave
//     it silently incomplete; appenders never create it.
//   - The file exists only if it was made complete: by Ensure when it
//     creates runs/done (no runs yet), by a rebuild from every record, or by
//     a compaction of a complete index.
//
// Format: a header line, then one line per entry, each preceded by an empty
// line so that a torn or zero-filled tail (a power cut) can never swallow
// the next entry; a line whose CRC does not match is skipped:
//
//	\n<appended ns>\t<finished ns>\t<written ns>\t<run id>\t<state>\t<exit code or ->\t<quoted task>\t<crc32 hex>\n
//
// "appended" orders the file (the time of the append; for a rebuilt entry,
// the run's finish); "written" is when the entry was made, so that crew
// recover can tell a record changed after it was indexed (by hand, or by
// anyone who can write the state root) and index it again: a newer entry
// of a run overrides an older one.
//
// Concurrency without any lock of crew's: appends are single O_APPEND
// writes under a shared flock of the index file itself, so concurrent
// finishers never overwrite each other; whoever replaces the file (a
// compaction, a rebuild) holds an exclusive flock of the file it replaces,
// and an appender that got its shared lock checks that its file is still
// the one at the name, else opens the new one. Waits are bounded
// (lockfs.LockData); an appender that gives up keeps the run's active file
// so the entry is added later.
//
// Bounded: prune and retention remove runs without touching the index; an
// append that takes the file across a power of two from 1 MiB on asks for
// a compaction (dropping entries whose record is gone, and duplicates),
// done by the run's own supervisor after its locks are released, so the
// file stays within about twice what its live entries need. crew prune
// compacts after removing runs.

const (
	finishedIdxName   = "finished.idx"
	finishedIdxHeader = "crew index of finished runs, version 1\n"
	indexMaxBytes     = 256 << 20
	// indexCompactFrom is the smallest size at which an append asks for a
	// compaction.
	indexCompactFrom = 1 << 20
	// indexLockWait bounds an appender's wait for a compaction or rebuild
	// that holds the index.
	indexLockWait = 5 * time.Second
	// indexSkew is how far the append times of entries may run out of
	// order (two finishers between reading the clock and writing), for the
	// rule that ends a scan of the newest entries.
	indexSkew = 30 * time.Second
	// mtimeSlack covers the file system's coarser clock, for the fallback
	// that orders records by their files' modification times.
	mtimeSlack = time.Second
	// changeSlack is how much later than its entry a record's file may be
	// modified before crew recover takes it as changed after it was
	// indexed. None: file times come from the kernel's coarse clock,
	// which lags the clock entries are stamped with, so a record written
	// before its entry never looks newer than it.
	changeSlack = 0
)

// Index is a state root's knowledge of its finished runs.
type Index struct {
	runs stateroot.Dir // runs/: finished.idx, done.index
	done stateroot.Dir // runs/done/: the finished records, by shard
	recs Records
	logs *runlog.Logs // what the finished runs' logs take
	// compactDue: an append of this process took the index across a size
	// at which it asks to be compacted.
	compactDue atomic.Bool
}

// Records is what the index needs of the run records it is derived from,
// which package runstore keeps.
type Records interface {
	// Exists reports whether the state root exists.
	Exists() bool
	// ReadDone reads a run's finished record; an error satisfying
	// errors.Is(err, fs.ErrNotExist) if it has none.
	ReadDone(id record.RunID) (*record.Run, error)
	// ReadActive reads a run's record in the active set: for a run whose
	// final record is there still (its move among the finished runs was
	// cut short), that record.
	ReadActive(id record.RunID) (*record.Run, error)
	// IsDone reports whether the run has a finished record.
	IsDone(id record.RunID) bool
	// DonePath is where a run's finished record is, for messages.
	DonePath(id record.RunID) string
	// ActiveIDs is the set of runs with a file in the active set (a run
	// whose finish was cut short is still there).
	ActiveIDs() map[record.RunID]bool
}

// New returns the finished runs of a state root: runs and done are its
// runs/ and runs/done/, recs its records, logs its runs' logs.
func New(runs, done stateroot.Dir, recs Records, logs *runlog.Logs) *Index {
	return &Index{runs: runs, done: done, recs: recs, logs: logs}
}

// finishedEntry is one line of the index: enough to order and filter runs
// without reading their records.
type finishedEntry struct {
	ID       record.RunID
	Task     string
	State    record.State
	Exit     *int
	Finished time.Time
	Appended time.Time
	Written  time.Time // zero: the same as Appended
}

func entryOf(rec *record.Run, appended time.Time) finishedEntry {
	e := finishedEntry{ID: rec.RunID, Task: rec.Task, State: rec.State, Exit: rec.ExitCode, Appended: appended}
	if rec.FinishedAt != nil {
		e.Finished = *rec.FinishedAt
	}
	return e
}

func (e finishedEntry) encode(b []byte) []byte {
	b = append(b, '\n')
	start := len(b)
	b = strconv.AppendInt(b, e.Appended.UnixNano(), 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, e.Finished.UnixNano(), 10)
	b = append(b, '\t')
	written := e.Written
	if written.IsZero() {
		written = e.Appended
	}
	b = strconv.AppendInt(b, written.UnixNano(), 10)
	b = append(b, '\t')
	b = append(b, e.ID...)
	b = append(b, '\t')
	b = append(b, e.State...)
	b = append(b, '\t')
	if e.Exit == nil {
		b = append(b, '-')
	} else {
		b = strconv.AppendInt(b, int64(*e.Exit), 10)
	}
	b = append(b, '\t')
	b = strconv.AppendQuote(b, e.Task)
	sum := crc32.ChecksumIEEE(b[start:])
	b = append(b, '\t')
	const hex = "0123456789abcdef"
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, hex[sum>>uint(shift)&0xf])
	}
	return append(b, '\n')
}

// rawEntry is a line of the index checked and cut into its fields, with
// nothing allocated yet: scans read many lines and use few.
type rawEntry struct {
	appended, finished, written int64
	id, state, exit             []byte
	task                        []byte // quoted
}

// parseRaw checks and cuts one line (without its newline); false for
// anything that is not a whole, intact entry.
func parseRaw(line []byte) (rawEntry, bool) {
	var r rawEntry
	i := bytes.LastIndexByte(line, '\t')
	if i < 0 || len(line)-i-1 != 8 {
		return r, false
	}
	sum, ok := parseHex32(line[i+1:])
	if !ok || sum != crc32.ChecksumIEEE(line[:i]) {
		return r, false
	}
	var f [7][]byte
	rest := line[:i]
	for k := range 6 {
		j := bytes.IndexByte(rest, '\t')
		if j < 0 {
			return r, false
		}
		f[k], rest = rest[:j], rest[j+1:]
	}
	f[6] = rest
	var ok1, ok2, ok3 bool
	r.appended, ok1 = parseInt64(f[0])
	r.finished, ok2 = parseInt64(f[1])
	r.written, ok3 = parseInt64(f[2])
	if !ok1 || !ok2 || !ok3 || len(f[3]) != record.RunIDLen || len(f[6]) < 2 {
		return r, false
	}
	r.id, r.state, r.exit, r.task = f[3], f[4], f[5], f[6]
	return r, true
}

func (r rawEntry) appendedAt() time.Time { return time.Unix(0, r.appended) }
func (r rawEntry) finishedAt() time.Time { return time.Unix(0, r.finished) }

// stateOf is the entry's state, without allocating for the known ones.
func (r rawEntry) stateOf() record.State {
	for _, st := range []record.State{record.Succeeded, record.Failed, record.Stopped, record.Interrupted} {
		if string(r.state) == string(st) {
			return st
		}
	}
	return record.State(r.state)
}

// exitCodes gives every exit code an address, so entries need not
// allocate one; nobody writes through them.
var exitCodes = func() (c [256]int) {
	for i := range c {
		c[i] = i
	}
	return c
}()

func (r rawEntry) exitOf() (*int, bool) {
	if string(r.exit) == "-" {
		return nil, true
	}
	n, ok := parseInt64(r.exit)
	if !ok {
		return nil, false
	}
	if n >= 0 && n < int64(len(exitCodes)) {
		return &exitCodes[n], true
	}
	code := int(n)
	return &code, true
}

// taskOf unquotes the task, through tasks (quoted → name) so that a
// name repeated across many entries is unquoted once.
func (r rawEntry) taskOf(tasks map[string]string) (string, bool) {
	if t, ok := tasks[string(r.task)]; ok {
		return t, true
	}
	t, err := strconv.Unquote(string(r.task))
	if err != nil {
		return "", false
	}
	if tasks != nil {
		tasks[string(r.task)] = t
	}
	return t, true
}

// entry is the whole entry.
func (r rawEntry) entry(tasks map[string]string) (finishedEntry, bool) {
	task, ok1 := r.taskOf(tasks)
	exit, ok2 := r.exitOf()
	if !ok1 || !ok2 {
		return finishedEntry{}, false
	}
	return finishedEntry{ID: record.RunID(r.id), Task: task, State: r.stateOf(), Exit: exit,
		Finished: r.finishedAt(), Appended: r.appendedAt(), Written: time.Unix(0, r.written)}, true
}

// parseEntry parses one line (without its newline) into an entry.
func parseEntry(line []byte) (finishedEntry, bool) {
	r, ok := parseRaw(line)
	if !ok {
		return finishedEntry{}, false
	}
	return r.entry(nil)
}

func parseInt64(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	limit := uint64(math.MaxInt64)
	if neg {
		limit++ // math.MinInt64 is written too (the stamp of a clock gone wrong)
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' || n > (limit-uint64(c-'0'))/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if neg {
		return int64(-n), true
	}
	return int64(n), true
}

func parseHex32(b []byte) (uint32, bool) {
	var n uint32
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			n = n<<4 | uint32(c-'0')
		case 'a' <= c && c <= 'f':
			n = n<<4 | uint32(c-'a'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

// IndexPath is the index's path, for messages.
func (ix *Index) IndexPath() string { return ix.runs.Path(finishedIdxName) }

// Append appends rec's entry, if there is an index. It returns
// false when the entry could not be written and the index could not be
// taken out of use either (or a compaction held it too long): the caller
// then keeps the run's active file, so whoever cleans it up indexes it.
func (ix *Index) Append(rec *record.Run) bool {
	dir, err := ix.runs.Open()
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	defer dir.Close()
	ok, compact := ix.appendFinished(dir, []finishedEntry{entryOf(rec, time.Time{})})
	if compact {
		ix.compactDue.Store(true)
	}
	return ok
}

// appendFinished appends entries to the index in one write, stamped with the
// time of the write: the clock is read once the file is locked, right
// before the write, so that the stamps of entries in the file are in order
// to within a few system calls (readers rely on it to within indexSkew).
// A stamp is never earlier than the last entry's: a clock stepped back
// must not stamp entries that end a reader's walk before the runs that
// finished earlier by the clock but later in fact (see indexWalk).
// compact: the file crossed a size at which it asks to be compacted.
func (ix *Index) appendFinished(dir *os.Root, entries []finishedEntry) (ok, compact bool) {
	var lines []byte
	const attempts = 20
	for attempt := 1; attempt <= attempts; attempt++ {
		f, err := rootfs.Open(dir, finishedIdxName, os.O_RDWR|os.O_APPEND, 0)
		var notRegular *rootfs.NotRegularError
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return true, false // no index: readers use the records
		case errors.As(err, &notRegular), err != nil && attempt == attempts:
			return ix.dropIndex(dir, err) == nil, false
		case err != nil:
			// Replaced while being opened (a compaction), or a second link
			// for the instant in which Ensure links a new index into place:
			// try again. Anything that lasts is taken out of use above.
			time.Sleep(time.Millisecond)
			continue
		}
		lk, err := lockfs.LockData(dir, finishedIdxName, f, false, indexLockWait)
		if errors.Is(err, lockfs.ErrGone) {
			// Replaced by a compaction or rebuild (append to the new one),
			// or a second link for an instant, as above.
			_ = f.Close()
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			_ = f.Close()
			return false, false
		}
		lines = lines[:0]
		now := time.Now()
		if fi, err := f.Stat(); err == nil {
			if last := lastStamp(f, fi.Size()); last > now.UnixNano() {
				now = time.Unix(0, last)
			}
		}
		for _, e := range entries {
			e.Appended = now
			lines = e.encode(lines)
		}
		n, werr := len(lines), failpoint.Error(failpoint.IndexAppend)
		if werr == nil {
			n, werr = f.Write(lines)
		}
		end, serr := f.Seek(0, io.SeekCurrent)
		if werr != nil || n != len(lines) {
			// A short or failed write (a full disk) leaves the index without
			// this entry: out of use it goes, while our shared lock keeps
			// anyone from replacing it meanwhile.
			rerr := ix.runs.Remove(dir, finishedIdxName)
			_ = lk.Release()
			_ = f.Close()
			return rerr == nil, false
		}
		_ = lk.Release()
		_ = f.Close()
		return true, serr == nil && crossesCompactSize(end-int64(len(lines)), end)
	}
	return false, false // replaced every time we looked: keep the active file
}

// crossesCompactSize reports whether growing from before to after bytes
// crosses a power of two at or above indexCompactFrom.
func crossesCompactSize(before, after int64) bool {
	return after >= indexCompactFrom && bits.Len64(uint64(before)) != bits.Len64(uint64(after))
}

// dropIndex takes an index that cannot be used out of the way: removed if
// it is a regular file of crew's (the records are its source), moved into
// quarantine/ with a note if it is anything else (a planted link, FIFO,
// directory, or a file with a second hard link), so that readers fall back
// to the records.
func (ix *Index) dropIndex(dir *os.Root, why error) error {
	fi, err := dir.Lstat(finishedIdxName)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode().IsRegular() && rootfs.Links(fi) == 1:
		return ix.runs.Remove(dir, finishedIdxName)
	}
	_, err = ix.runs.Quarantine(finishedIdxName, fmt.Sprintf("%v; crew keeps its index of finished runs there, so it moved this aside", why), "crew")
	return err
}

// Create makes an empty index when runs/done has just been made:
// there are no finished runs, so empty is complete. It is linked into place
// (never over another index), and removed again if a run finished into
// runs/done before it was there (then crew recover builds one).
func (ix *Index) Create() {
	dir, err := ix.runs.Open()
	if err != nil {
		return
	}
	defer dir.Close()
	tmp := ix.runs.TempName(finishedIdxName)
	f, err := rootfs.Open(dir, tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, ix.runs.FilePerm())
	if err != nil {
		return
	}
	_, err = f.Write([]byte(finishedIdxHeader))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = dir.Link(tmp, finishedIdxName) // never over another index
	}
	_ = dir.Remove(tmp)
	if err != nil {
		return // someone else made one
	}
	if shards, err := ix.Shards(); err != nil || len(shards) > 0 {
		_ = ix.runs.Remove(dir, finishedIdxName)
	}
}

// openIndex opens the index for reading and checks its header; nil (and
// why) if there is none that can be used.
func (ix *Index) openIndex() (f *os.File, size int64, why error) {
	dir, err := ix.runs.Open()
	if err != nil {
		return nil, 0, err
	}
	defer dir.Close()
	f, err = rootfs.Open(dir, finishedIdxName, os.O_RDONLY, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() > indexMaxBytes {
		err = &rootfs.TooLargeError{Name: finishedIdxName, Size: fi.Size(), Limit: indexMaxBytes}
	}
	if err == nil {
		head := make([]byte, len(finishedIdxHeader))
		if _, rerr := f.ReadAt(head, 0); rerr != nil || string(head) != finishedIdxHeader {
			err = errors.New("it does not start with the header of a version crew reads")
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// CompactIfDue compacts the index if an append of this process asked for
// it. Callers hold no lock of crew's (never the admission lock): it reads
// and rewrites the whole index.
func (ix *Index) CompactIfDue() {
	if ix.compactDue.CompareAndSwap(true, false) {
		_, _ = ix.CompactIndex()
	}
}

// CompactIndex rewrites the index without the entries of runs whose record
// is gone and without duplicates, and returns how many entries it dropped.
// Appends made meanwhile are carried over under an exclusive lock held
// only for the last step. Without a usable index it does nothing.
func (ix *Index) CompactIndex() (dropped int, err error) {
	f, size, err := ix.openIndex()
	if err != nil {
		return 0, nil // nothing to compact: no usable index
	}
	defer f.Close()
	return ix.compactIndex(f, size)
}

// compactIndex is CompactIndex of the open index f, of which size bytes
// were there when it was opened (the last of them may be part of an
// append still being written).
func (ix *Index) compactIndex(f *os.File, size int64) (dropped int, err error) {
	entries, junk, whole, err := readIndexLines(f, size)
	if err != nil {
		return 0, err
	}
	kept := ix.liveEntries(entries)
	dropped = len(entries) - len(kept)
	if dropped == 0 && junk == 0 {
		return 0, nil
	}
	content := []byte(finishedIdxHeader)
	for _, e := range kept {
		content = e.encode(content)
	}
	dir, err := ix.runs.Open()
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	// Carry over from the end of the last whole line: an entry cut at size
	// (an append caught half written) is read whole under the lock.
	return dropped, ix.replaceIndex(dir, f, whole, content)
}

// liveEntries keeps the last (newest) entry of each run whose record
// exists, in file order. Each shard an entry points into is listed once
// (cheaper than a stat per entry, whether a shard holds 40 runs or
// 100,000).
func (ix *Index) liveEntries(entries []finishedEntry) []finishedEntry {
	last := make(map[record.RunID]int, len(entries))
	for i, e := range entries {
		last[e.ID] = i
	}
	shards := map[string]map[string]bool{}
	var kept []finishedEntry
	for i, e := range entries {
		if last[e.ID] != i || !record.WellFormedRunID(string(e.ID)) {
			continue
		}
		shard := e.ID.Shard()
		names, ok := shards[shard]
		if !ok {
			names = map[string]bool{}
			list, _ := ix.shardNames(shard) // none: a shard pruned away, or never there
			for _, n := range list {
				names[n] = true
			}
			shards[shard] = names
		}
		if names[stateroot.RecordName(e.ID)] || names[stateroot.V1RecordName(e.ID)] {
			kept = append(kept, e)
		}
	}
	return kept
}

// replaceIndex puts content in place of old (open, read up to size):
// under old's exclusive lock, it carries over what was appended to old
// after size, checks that old is still the index, and renames.
func (ix *Index) replaceIndex(dir *os.Root, old *os.File, size int64, content []byte) error {
	t, err := ix.runs.PendingFile(dir, finishedIdxName)
	if err != nil {
		return err
	}
	defer t.Cleanup() // the temporary file, unless renamed
	if _, err := t.Write(content); err != nil {
		return err
	}
	lk, err := lockfs.LockData(dir, finishedIdxName, old, true, indexLockWait)
	if errors.Is(err, lockfs.ErrGone) {
		return errors.New("the index was replaced meanwhile")
	}
	if err != nil {
		return err
	}
	defer lk.Release() // after the rename below
	fi, err := old.Stat()
	if err != nil {
		return err
	}
	if fi.Size() > size {
		// Under the exclusive lock no append is in progress: every line
		// is whole, the last one ends with its newline.
		var carried []byte
		_, err := forward(old, size, fi.Size(), func(line []byte, _ bool) {
			if e, ok := parseEntry(line); ok {
				carried = e.encode(carried)
			}
		})
		if err != nil {
			return err
		}
		if _, err := t.Write(carried); err != nil {
			return err
		}
	}
	return t.CloseAtomicallyReplace()
}

// rebuildFrom is how many missing runs make CheckIndex rebuild the index
// rather than append them.
const rebuildFrom = 1000

// IndexRepair is what CheckIndex found and did.
type IndexRepair struct {
	Path string
	// Rebuilt: the index was missing or unusable, or its entries were
	// stamped out of order (Why), and was made anew from every finished
	// record.
	Rebuilt bool
	Why     string
	// Junk: lines that are not entries crew wrote, dropped from the index.
	Junk int
	// Added: finished runs that were missing from a usable index.
	Added int
	// Changed: finished records changed after they were indexed (by
	// hand), indexed again.
	Changed int
	// Unreadable: of those added or changed, the records crew cannot
	// read, indexed as such so that status and history list them as
	// problems.
	Unreadable int
	// Runs is how many finished runs the index lists now.
	Runs int
}

// CheckIndex makes the index agree with the finished records: it builds
// one if there is none (or none that can be used, or one whose stamps are
// out of order), drops lines that are not entries, and adds the runs a
// usable one lacks (written by an older crew, copied in by hand, or lost
// to a power cut). It lists every finished record, so it is for crew
// recover, not for every command. With dry, it changes nothing and says
// what it would do.
func (ix *Index) CheckIndex(dry bool) (*IndexRepair, error) {
	rep := &IndexRepair{Path: ix.IndexPath()}
	if !ix.recs.Exists() {
		return rep, nil
	}
	f, size, why := ix.openIndex()
	if f == nil {
		if errors.Is(why, fs.ErrNotExist) {
			why = errors.New("it is missing")
		}
		return ix.rebuildFor(rep, why, dry)
	}
	defer f.Close()
	entries, junk, _, err := readIndexLines(f, size)
	if err != nil {
		return nil, err
	}
	if outOfOrder(entries) {
		f.Close()
		return ix.rebuildFor(rep, errors.New("its entries were stamped out of order (a clock set back, or an edit by hand), which can end the newest-first reads of status and history too early"), dry)
	}
	missing, err := ix.unindexed(entries, rep)
	if err != nil {
		return nil, err
	}
	if len(missing) > rebuildFrom {
		// Appended now, so many entries would share one append time and
		// make every newest-first scan read them all: a rebuild orders
		// them by finish instead.
		f.Close()
		*rep = IndexRepair{Path: rep.Path, Runs: rep.Runs}
		return ix.rebuildFor(rep, fmt.Errorf("it lacked %d of %d finished runs, or had them as they were before a change", len(missing), rep.Runs), dry)
	}
	rep.Junk = junk
	if dry {
		return rep, nil
	}
	if junk > 0 {
		if _, err := ix.compactIndex(f, size); err != nil {
			return nil, fmt.Errorf("drop %d lines that are not entries from the index %s: %w", junk, rep.Path, err)
		}
	}
	return rep, ix.addEntries(missing, rep.Path)
}

// rebuildFor is CheckIndex's rebuild, for why.
func (ix *Index) rebuildFor(rep *IndexRepair, why error, dry bool) (*IndexRepair, error) {
	rep.Rebuilt, rep.Why = true, why.Error()
	if dry {
		return rep, nil
	}
	n, err := ix.rebuildIndex(why)
	rep.Runs = n
	return rep, err
}

// outOfOrder reports whether an entry was stamped earlier than one before
// it, by more than concurrent appends can make it.
func outOfOrder(entries []finishedEntry) bool {
	high := int64(math.MinInt64)
	for _, e := range entries {
		at := e.Appended.UnixNano()
		if at < high && uint64(high-at) > uint64(indexSkew) {
			return true
		}
		high = max(high, at)
	}
	return false
}

// unindexed lists the entries to add for the finished records the index
// lacks or has as they were before a change (entries: the index's), and
// counts them and every finished run in rep. A record that cannot be read
// is indexed all the same, with what its file tells (see unreadableEntry).
func (ix *Index) unindexed(entries []finishedEntry, rep *IndexRepair) ([]finishedEntry, error) {
	written := make(map[record.RunID]time.Time, len(entries))
	for _, e := range entries {
		written[e.ID] = e.Written // the last entry of a run is the one that counts
	}
	files, err := ix.finishedFiles()
	if err != nil {
		return nil, err
	}
	active := ix.recs.ActiveIDs()
	var missing []finishedEntry
	for _, file := range files {
		w, indexed := written[file.id]
		switch {
		case active[file.id]:
			continue // its finisher (or whoever reaps it) indexes it
		case indexed && !file.mod.After(w.Add(changeSlack)):
			continue
		}
		rec, err := ix.recs.ReadDone(file.id)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // pruned meanwhile
		case err != nil:
			missing = append(missing, unreadableEntry(file))
			rep.Unreadable++
		default:
			missing = append(missing, entryOf(rec, time.Time{}))
		}
		if indexed {
			rep.Changed++
		} else {
			rep.Added++
		}
	}
	rep.Runs = len(files)
	return missing, nil
}

// unreadableEntry is the entry of a finished record crew cannot read: no
// task, state or exit code, and its file's modification time (never
// earlier than the finish it may hold) as its finish. Readers that reach
// it read the record, fail, and report it.
func unreadableEntry(file finishedFile) finishedEntry {
	return finishedEntry{ID: file.id, Finished: file.mod}
}

// addEntries appends the entries of runs the index lacks, oldest finish
// first.
func (ix *Index) addEntries(add []finishedEntry, path string) error {
	if len(add) == 0 {
		return nil
	}
	slices.SortFunc(add, byEntryFinish)
	dir, err := ix.runs.Open()
	if err != nil {
		return err
	}
	defer dir.Close()
	if ok, _ := ix.appendFinished(dir, add); !ok {
		return fmt.Errorf("add %d finished runs to the index %s: it stayed busy", len(add), path)
	}
	return nil
}

// byFinish orders records oldest finish first.
func byFinish(a, b *record.Run) int {
	if c := finishOf(a).Compare(finishOf(b)); c != 0 {
		return c
	}
	return bytes.Compare([]byte(a.RunID), []byte(b.RunID))
}

func finishOf(r *record.Run) time.Time {
	if r.FinishedAt == nil {
		return time.Time{}
	}
	return *r.FinishedAt
}

// rebuildIndex makes the index anew from every finished record and
// returns how many runs it lists. The records are read without any lock;
// the new index is then put in place under an exclusive lock of its own
// (and of the one it replaces, if any), and before that lock goes, every
// record is listed once more, so a run that finished meanwhile (whose
// finisher found no index, or the old one) is in it too.
func (ix *Index) rebuildIndex(why error) (int, error) {
	files, err := ix.finishedFiles()
	if err != nil {
		return 0, err
	}
	have := make(map[record.RunID]bool, len(files))
	entries := ix.entriesOf(files, have)
	content := []byte(finishedIdxHeader)
	now := time.Now()
	for _, e := range entries {
		// Rebuilt entries are "appended" when they finished, so the file
		// stays in append-time order for the newest-first scans.
		e.Appended, e.Written = e.Finished, now
		content = e.encode(content)
	}
	dir, err := ix.runs.Open()
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	tl, err := ix.placeIndex(dir, content, why)
	if err != nil {
		return 0, fmt.Errorf("rebuild the index %s: %w", ix.IndexPath(), err)
	}
	defer tl.Release()
	late, err := ix.finishedFiles()
	if err != nil {
		return len(entries), nil // the index is complete as far as the first listing goes
	}
	late = slices.DeleteFunc(late, func(f finishedFile) bool { return have[f.id] })
	var lines []byte
	now = time.Now()
	for _, e := range ix.entriesOf(late, have) {
		e.Appended = now
		lines = e.encode(lines)
	}
	if err := appendLocked(dir, tl, lines); err != nil {
		_ = ix.runs.Remove(dir, finishedIdxName)
		return 0, fmt.Errorf("rebuild the index %s: %w", ix.IndexPath(), err)
	}
	return len(have), nil
}

// entriesOf reads the records of files and returns their entries, oldest
// finish first (a record that cannot be read gets unreadableEntry's), and
// marks each in have.
func (ix *Index) entriesOf(files []finishedFile, have map[record.RunID]bool) []finishedEntry {
	var entries []finishedEntry
	for _, file := range files {
		rec, err := ix.recs.ReadDone(file.id)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // pruned meanwhile
		case err != nil:
			entries = append(entries, unreadableEntry(file))
		default:
			entries = append(entries, entryOf(rec, time.Time{}))
		}
		have[file.id] = true
	}
	slices.SortFunc(entries, byEntryFinish)
	return entries
}

// byEntryFinish orders entries oldest finish first.
func byEntryFinish(a, b finishedEntry) int {
	if c := a.Finished.Compare(b.Finished); c != 0 {
		return c
	}
	return strings.Compare(string(a.ID), string(b.ID))
}

// placeIndex writes content as the new index, in place of whatever is at
// its name (renameio: a temporary file beside it, fsynced, renamed): a
// regular file is locked before it is replaced (a compaction may be
// working on it); anything else goes to quarantine. It returns the new
// index's exclusive lock, taken before the file had its name and held
// until the caller releases it, so that runs that finished meanwhile can
// be added (appendLocked) before anyone else appends.
func (ix *Index) placeIndex(dir *os.Root, content []byte, why error) (*lockfs.Lock, error) {
	t, err := ix.runs.PendingFile(dir, finishedIdxName)
	if err != nil {
		return nil, err
	}
	defer t.Cleanup() // the temporary file, unless renamed
	tl, err := lockfs.LockData(dir, filepath.Base(t.Name()), t.File, true, 0)
	if err != nil {
		return nil, err
	}
	if _, err := t.Write(content); err != nil {
		_ = tl.Release()
		return nil, err
	}
	if err := ix.replaceLockedIndex(dir, t, why); err != nil {
		_ = tl.Release()
		return nil, err
	}
	return tl, nil
}

// replaceLockedIndex renames t over the index,
// once the index it replaces (if a regular file) is locked by this process
// too, or moved out of the way (anything else).
func (ix *Index) replaceLockedIndex(dir *os.Root, t *renameio.PendingFile, why error) error {
	old, err := rootfs.Open(dir, finishedIdxName, os.O_RDONLY, 0)
	switch {
	case err == nil:
		defer old.Close()
		ol, err := lockfs.LockData(dir, finishedIdxName, old, true, indexLockWait)
		switch {
		case err == nil:
			defer ol.Release() // until after the rename
		case !errors.Is(err, lockfs.ErrGone): // gone or replaced: nothing to wait for
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		if err := ix.dropIndex(dir, why); err != nil {
			return err
		}
	}
	return t.CloseAtomicallyReplace()
}

// appendLocked appends lines to the index, whose lock l this process
// holds (so nobody has replaced it since).
func appendLocked(dir *os.Root, l *lockfs.Lock, lines []byte) error {
	if len(lines) == 0 {
		return nil
	}
	f, err := rootfs.Open(dir, finishedIdxName, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	locked, err := l.Stat()
	if err != nil {
		return err
	}
	if fi, err := f.Stat(); err != nil || !os.SameFile(fi, locked) {
		return errors.New("the index was replaced under its lock")
	}
	_, err = f.Write(lines)
	return err
}

// finishedIDs lists the run ids of every finished record, in no order.
func (ix *Index) finishedIDs() ([]record.RunID, error) {
	shards, err := ix.Shards()
	if err != nil {
		return nil, err
	}
	var ids []record.RunID
	for _, shard := range shards {
		names, err := ix.shardNames(shard)
		var notDir *stateroot.NotDirError
		if errors.Is(err, fs.ErrNotExist) || errors.As(err, &notDir) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			ids = append(ids, stateroot.RecordID(n))
		}
	}
	return ids, nil
}

// finishedFile is a finished record's run id and its file's modification
// time.
type finishedFile struct {
	id  record.RunID
	mod time.Time
}

// finishedFiles lists every finished record with its modification time.
func (ix *Index) finishedFiles() ([]finishedFile, error) {
	shards, err := ix.Shards()
	if err != nil {
		return nil, err
	}
	var out []finishedFile
	for _, shard := range shards {
		names, err := ix.shardNames(shard)
		var notDir *stateroot.NotDirError
		if errors.Is(err, fs.ErrNotExist) || errors.As(err, &notDir) {
			continue
		}
		if err != nil {
			return nil, err
		}
		dir, err := ix.done.Open(shard)
		if err != nil {
			continue
		}
		for _, n := range names {
			if fi, err := dir.Lstat(n); err == nil {
				out = append(out, finishedFile{id: stateroot.RecordID(n), mod: fi.ModTime()})
			}
		}
		dir.Close()
	}
	return out, nil
}
