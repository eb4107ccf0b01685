package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Store reads and writes run records under a state root.
type Store struct {
	Layout
}

// New returns the store for a state root.
func New(root string) Store { return Store{Layout{Root: root}} }

// ActiveEntry is one file of the active set. Unless Finished is set,
// exactly one of Rec and Err is set: a file that cannot be read as a record
// is reported, never skipped silently and never fatal to the listing.
type ActiveEntry struct {
	ID   RunID // from the file name; empty if the name is not a run id
	Path string
	Rec  *Record
	Err  error
	// Finished: the run already has a finished record; this active file is
	// a leftover of its finalization and holds no slot.
	Finished bool
}

// ListActive reads every record in the active set. Its cost is O(active
// runs), whatever the history.
func (s Store) ListActive() ([]ActiveEntry, error) {
	ents, err := os.ReadDir(s.ActiveDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list active runs: %w", unwrapPath(err))
	}
	out := make([]ActiveEntry, 0, len(ents))
	for _, e := range ents {
		name := e.Name()
		if IsTempName(name) {
			continue
		}
		out = append(out, s.readActive(name))
	}
	return out, nil
}

func (s Store) readActive(name string) ActiveEntry {
	path := filepath.Join(s.ActiveDir(), name)
	ent := ActiveEntry{Path: path}
	idStr, isJSON := strings.CutSuffix(name, ".json")
	if !isJSON || !LooksLikeRunID(idStr) {
		ent.Err = fmt.Errorf("foreign file %s in the active set: not <run-id>.json", path)
		return ent
	}
	ent.ID = RunID(idStr)
	if s.IsDone(ent.ID) {
		ent.Finished = true
		return ent
	}
	rec, err := s.ReadRecord(path)
	if errors.Is(err, os.ErrNotExist) {
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
		ent.Err = fmt.Errorf("run record %s: says runId %s, but its file name says %s", path, rec.RunID, ent.ID)
		return ent
	}
	ent.Rec = rec
	return ent
}

// ReadRecord reads and decodes one record file; errors name the file.
func (s Store) ReadRecord(path string) (*Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read run record: %w", unwrapPath(err))
	}
	rec, err := DecodeRecord(data)
	if err != nil {
		return nil, fmt.Errorf("run record %s: %w", path, err)
	}
	return rec, nil
}

// WriteActive durably writes rec into the active set, creating or
// replacing its file (file fsync, rename, directory fsync).
func (s Store) WriteActive(rec *Record) error {
	return s.writeActive(rec, WriteDurable)
}

// UpdateActive replaces an active record atomically but without the
// directory fsync. It is for the provisioning → running step: after a power
// loss the provisioning record may come back, which recovery reports
// truthfully ("the command may have started"), and nothing acts on the
// running record before the run is finalized durably.
func (s Store) UpdateActive(rec *Record) error {
	return s.writeActive(rec, WriteAtomic)
}

func (s Store) writeActive(rec *Record, write func(string, []byte) error) error {
	b, err := rec.Encode()
	if err != nil {
		return err
	}
	if err := write(s.ActivePath(rec.RunID), b); err != nil {
		return fmt.Errorf("record run %s as %s: %w", rec.RunID, rec.State, err)
	}
	return nil
}

// WriteDone durably writes a final record into the finished runs. Until
// RemoveActive runs, the run's stale active record still exists; every
// reader treats an active record whose finished record exists as finished
// (see ActiveEntry.Finished), so the two never disagree.
func (s Store) WriteDone(rec *Record) error {
	if rec.State.Active() {
		return fmt.Errorf("write finished record of run %s: state %s is not final", rec.RunID, rec.State)
	}
	b, err := rec.Encode()
	if err != nil {
		return err
	}
	day := s.DoneShardDir(rec.RunID)
	// crew prune removes empty day directories; if it removes this one
	// between our mkdir and our write, make it again.
	for attempt := 0; ; attempt++ {
		if _, err := os.Stat(day); err == nil {
			// Exists: the common case, and a stat is cheaper than a
			// failing mkdir, which takes the directory's lock.
		} else if err := os.Mkdir(day, DirPerm); err == nil {
			if err := SyncDir(s.DoneDir()); err != nil {
				return err
			}
		} else if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("record run %s as %s: %w", rec.RunID, rec.State, unwrapPath(err))
		}
		err := WriteDurable(s.DonePath(rec.RunID), b)
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == 2 {
			return fmt.Errorf("record run %s as %s: %w", rec.RunID, rec.State, err)
		}
	}
}

// RemoveActive takes a finalized run out of the active set. No directory
// fsync: if the removal is lost in a power loss, the stale active record
// comes back next to its finished record, and is treated as finished.
func (s Store) RemoveActive(id RunID) error {
	if err := os.Remove(s.ActivePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove run %s from the active set: %w", id, unwrapPath(err))
	}
	return nil
}

// IsDone reports whether the run has a finished record.
func (s Store) IsDone(id RunID) bool {
	_, err := os.Stat(s.DonePath(id))
	return err == nil
}

// ReadRun finds a run's record: the finished one if it exists, else the
// active one.
func (s Store) ReadRun(id RunID) (*Record, error) {
	rec, err := s.ReadRecord(s.DonePath(id))
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return rec, err
	}
	rec, err = s.ReadRecord(s.ActivePath(id))
	if errors.Is(err, os.ErrNotExist) {
		// It may have been finalized between the two reads.
		if rec, err2 := s.ReadRecord(s.DonePath(id)); err2 == nil {
			return rec, nil
		}
		return nil, fmt.Errorf("no run %s in %s: %w", id, s.Root, os.ErrNotExist)
	}
	return rec, err
}

// RecentFinished returns up to n finished records, newest first, for which
// keep returns true (all, if keep is nil). It walks the day directories
// from the newest, so its cost follows how far back it must look, not the
// whole history. Unreadable records are returned in bad.
func (s Store) RecentFinished(n int, keep func(*Record) bool) (recs []*Record, bad []error, err error) {
	days, err := os.ReadDir(s.DoneDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list finished runs: %w", unwrapPath(err))
	}
	for i := len(days) - 1; i >= 0 && len(recs) < n; i-- {
		if !days[i].IsDir() || IsTempName(days[i].Name()) {
			continue
		}
		dir := filepath.Join(s.DoneDir(), days[i].Name())
		names, err := readNames(dir)
		if err != nil {
			return recs, bad, err
		}
		// Most calls want the newest few of a large directory: take those
		// without sorting it all, and sort it all only if they fall short.
		order := newestN(names, n+8)
		for j := 0; j < len(names) && len(recs) < n; j++ {
			if j == len(order) {
				slices.Sort(names)
				slices.Reverse(names)
				order = names
			}
			rec, err := s.ReadRecord(filepath.Join(dir, order[j]))
			if err != nil {
				bad = append(bad, err)
				continue
			}
			if keep == nil || keep(rec) {
				recs = append(recs, rec)
			}
		}
	}
	return recs, bad, nil
}

// newestN returns the k largest names (run ids sort by creation time),
// largest first, in O(len(names)·k) comparisons with k small.
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

func readNames(dir string) ([]string, error) {
	names, err := ReadDirNames(dir)
	if err != nil {
		return nil, fmt.Errorf("list finished runs: %w", unwrapPath(err))
	}
	return slices.DeleteFunc(names, func(n string) bool {
		return IsTempName(n) || !strings.HasSuffix(n, ".json")
	}), nil
}
