package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/stateroot"
)

// kernelTableAbove is the size of the active set from which ScanActive
// reads the kernel's lock table once instead of probing every lock file:
// one read of /proc/locks is cheaper than a handful of probes.
const kernelTableAbove = 8

// ScanActive reads the active set and every run's liveness in one pass: the
// read admission, the queue and status all count slots from. It keeps one
// handle on each directory for the whole pass. Liveness is OwnerState's
// (fail closed), with one shortcut: a run whose owner lock the kernel's lock
// table shows held is alive without a probe (positive evidence only; a lock
// missing from the table is probed as usual).
//
// With fast (admission and the queue), a run that the active index knows
// and whose locks the kernel shows held is taken from the index instead of
// its record: its Rec then holds only what admission needs, with State
// running (Indexed is set); every other run is read from its record.
// Status, which shows records, does not ask for fast.
func (s records) ScanActive(fast bool) ([]backend.ActiveRun, error) {
	return s.scanActive(fast, nil)
}

// ScanActive is Store.ScanActive inside the admission lock, which may also
// tidy the active index.
func (a *Admission) ScanActive() ([]backend.ActiveRun, error) {
	return a.s.scanActive(true, a)
}

func (s records) scanActive(fast bool, adm *Admission) ([]backend.ActiveRun, error) {
	active, err := s.layout(activeDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list active runs: %w", err)
	}
	names, err := listNames(active)
	if err != nil {
		return nil, fmt.Errorf("list active runs in %s: %w", s.display(activeDir), unwrapPath(err))
	}
	sc := &scan{s: s.Store, shards: map[string]*os.Root{}}
	defer sc.close()
	if owners, err := s.layout(ownersDir); err == nil {
		sc.owners = owners
	} else if !errors.Is(err, fs.ErrNotExist) {
		sc.ownersErr = err
	}
	if len(names) > kernelTableAbove {
		sc.held, _ = lockfs.WriteLocks()
	}
	var indexLines int
	if fast && sc.held != nil {
		sc.index, indexLines = s.readIndex()
		sc.recs = make([]record.Run, 0, len(names))
	}
	out := make([]backend.ActiveRun, 0, len(names))
	ids := make([]record.RunID, 0, len(names))
	for _, name := range names {
		if stateroot.IsTempName(name) {
			continue
		}
		out = append(out, sc.entry(active, name))
		if id := out[len(out)-1].ID; id != "" {
			ids = append(ids, id)
		}
	}
	if adm != nil && indexLines > len(ids)+compactAbove {
		adm.compactIndex(sc.index, ids)
	}
	return out, nil
}

// scan is one ScanActive pass: its directory handles and the kernel's
// lock table.
type scan struct {
	s         *Store
	owners    *os.Root
	ownersErr error
	shards    map[string]*os.Root // nil value: the shard does not exist
	held      map[[2]uint64]bool
	index     map[record.RunID]*activeEntryLine
	// recs holds the records made from index entries: one allocation for
	// the pass rather than one a run (made with room for every name, so
	// it never grows; nothing writes through it once a run's is in).
	recs []record.Run
}

func (sc *scan) close() {
	for _, d := range sc.shards { // owners is the store's own (layout)
		if d != nil {
			d.Close()
		}
	}
}

func (sc *scan) entry(active *os.Root, name string) backend.ActiveRun {
	s := sc.s
	// The path is for messages: joined by hand (s.path is clean, name has no
	// separator), which for a large active set costs a tenth of Join.
	ent := backend.ActiveRun{ActiveEntry: backend.ActiveEntry{Name: name, Path: s.path + "/" + activeDir + "/" + name}}
	id, ok := stateroot.CutRecordName(name)
	if !ok {
		ent.Err = foreignActive(ent.Path)
		return ent
	}
	ent.ID = id
	if e, ok := sc.index[ent.ID]; ok && sc.held[heldKey(e.Locks.Owner)] && sc.held[heldKey(e.Locks.Supervisor)] {
		// A living run the index knows: no record to read. (If it has
		// just finished, its slot is counted a moment longer: fail closed.)
		sc.recs = append(sc.recs, e.run())
		ent.Rec, ent.Indexed = &sc.recs[len(sc.recs)-1], true
		ent.Owner = record.Owner{Owner: record.Alive, Supervisor: record.Alive}
		return ent
	}
	if sc.isDone(ent.ID) {
		ent.Finished = true
	} else {
		rec, err := s.readRecord(active, name, ent.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			ent.Finished = true // finalized (moved out) since the listing
		case err != nil:
			ent.Err = err
		case rec.RunID != ent.ID:
			ent.Err = fmt.Errorf("run record %s: says runId %s, but its file name says %s", ent.Path, rec.RunID, ent.ID)
		default:
			ent.Rec = rec
			// A final record still in the active set (its move into
			// runs/done was cut short) holds no slot.
			ent.Finished = !rec.State.Active()
		}
	}
	ent.Owner = sc.owner(ent.ID, ent.Rec)
	return ent
}

// isDone reports whether the run has a finished record, through one
// handle per shard for the whole pass.
func (sc *scan) isDone(id record.RunID) bool {
	shard := id.Shard()
	d, ok := sc.shards[shard]
	if !ok {
		d, _ = sc.s.dir(shardDir(id))
		sc.shards[shard] = d
	}
	if d == nil {
		return false
	}
	_, err := findRecord(d, id)
	return err == nil
}

// owner is OwnerState for one run of the pass.
func (sc *scan) owner(id record.RunID, rec *record.Run) record.Owner {
	switch {
	case sc.ownersErr != nil:
		return record.Owner{Owner: record.Unknown, Supervisor: record.Unknown, Err: sc.ownersErr}
	case sc.owners == nil:
		return record.Owner{Owner: record.Dead, Supervisor: record.Dead}
	}
	var want *record.LockIDs
	if rec != nil {
		want = rec.Locks
	}
	if want != nil && sc.held[heldKey(want.Owner)] && sc.held[heldKey(want.Supervisor)] {
		return record.Owner{Owner: record.Alive, Supervisor: record.Alive}
	}
	return ownerState(sc.owners, id, want)
}

func heldKey(f record.FileID) [2]uint64 { return [2]uint64{f.Dev, f.Ino} }
