package runstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
	"github.com/crew-dev/crew/internal/slotrec"
	"github.com/crew-dev/crew/internal/stateroot"
)

// A run's record, since state-root version 2, is one slot file
// (package slotrec) that is written once through renameio at reservation,
// then updated in place and finally moved: runs/active/<id>.run →
// runs/done/<hour>/<id>.run. Records older crews wrote (<id>.json, whole
// JSON files replaced through renameio) are read alike, and a run that has
// one is finished the way those crews finish it (writeDone).

// recordName is the name crew gives a run's record.
func recordName(id record.RunID) string { return stateroot.RecordName(id) }

// decodeRecord decodes a record file of either format, told apart by its
// content.
func decodeRecord(data []byte) (*record.Run, error) {
	if !slotrec.IsSlotFile(data) {
		return record.DecodeRun(data)
	}
	f, err := slotrec.Decode(data)
	if err != nil {
		return nil, err
	}
	return record.DecodeRun(f.Payload())
}

// findRecord is the name run id's record has in dir: fs.ErrNotExist if
// it has none.
func findRecord(dir *os.Root, id record.RunID) (string, error) {
	_, name, err := stateroot.StatRecord(dir, id)
	return name, err
}

// runFile is a run's slot file, open read-write by the process that
// updates it (its supervisor, or a finalizer holding its fence).
type runFile struct {
	f *os.File
	w *slotrec.Writer
	// last is the payload of the newest slot (written or found), so a
	// finalizer that finds the final record already there does not write
	// it again.
	last []byte
}

func (rf *runFile) close() {
	if rf != nil && rf.f != nil {
		_ = rf.f.Close()
		rf.f = nil
	}
}

// createRunFile makes rec's record file in the active set durably (the
// reservation): the whole file, both slots, written through renameio
// beside its name, fsynced, renamed into place, and the directory fsynced.
// It is then opened again read-write, through the root, and proved to be
// the file just made (same inode), which the supervisor keeps to update it
// in place.
func (s records) createRunFile(dir *os.Root, rec *record.Run) (*runFile, error) {
	payload, err := rec.Encode()
	if err != nil {
		return nil, err
	}
	data, err := slotrec.Encode(payload, 1, 0)
	if err != nil {
		return nil, err
	}
	f, err := s.placeRunFile(dir, recordName(rec.RunID), data)
	if err != nil {
		return nil, err
	}
	return &runFile{f: f, w: slotrec.NewWriter(f, len(data)/2, 0, 1), last: payload}, nil
}

// placeRunFile puts a new slot file (data) at name in the active set
// durably, through renameio, and opens it read-write: the very file
// placed (same inode), checked through its descriptor. A directory
// planted at the name (rename cannot replace it) is moved into
// quarantine/ first, as replaceFile does; anything else at the name is
// simply replaced.
func (s records) placeRunFile(dir *os.Root, name string, data []byte) (*os.File, error) {
	f, err := s.placeRunFileOnce(dir, name, data)
	if err == nil {
		return f, nil
	}
	if fi, lerr := dir.Lstat(name); lerr != nil || !fi.IsDir() {
		return nil, err
	}
	if _, qerr := s.quarantine(activeDir, name, "a directory stood where crew writes a run's record", "crew"); qerr != nil {
		return nil, errors.Join(err, qerr)
	}
	return s.placeRunFileOnce(dir, name, data)
}

func (s records) placeRunFileOnce(dir *os.Root, name string, data []byte) (*os.File, error) {
	pf, err := s.pendingFile(dir, name)
	if err != nil {
		return nil, err
	}
	defer pf.Cleanup()
	if _, err := pf.Write(data); err != nil {
		return nil, err
	}
	made, err := pf.Stat()
	if err != nil {
		return nil, err
	}
	if err := pf.CloseAtomicallyReplace(); err != nil {
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	f, err := rootfs.Open(dir, name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !os.SameFile(fi, made) {
		_ = f.Close()
		if err == nil {
			err = &rootfs.ReplacedError{Name: name}
		}
		return nil, err
	}
	return f, nil
}

// openRunFile opens an existing slot file read-write to update it: a
// detached supervisor's, or a fenced run's. The writer must know which
// slot holds the newest durable record. With one valid slot, that is it:
// a writer never writes into that slot, so the other one (blank since the
// file was made, or torn) cannot have been the durable one. With two, the
// newer may be a write an earlier process did not sync: what the file
// holds is made durable first (one fsync).
func openRunFile(dir *os.Root, name string) (*runFile, *record.Run, error) {
	f, err := rootfs.Open(dir, name, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() > MaxRecordBytes {
		err = &rootfs.TooLargeError{Name: name, Size: fi.Size(), Limit: MaxRecordBytes}
	}
	var data []byte
	if err == nil {
		data, err = io.ReadAll(io.LimitReader(f, MaxRecordBytes+1))
	}
	var sf *slotrec.File
	if err == nil {
		sf, err = slotrec.Decode(data)
	}
	var rec *record.Run
	if err == nil {
		rec, err = record.DecodeRun(sf.Payload())
	}
	if err == nil && sf.Slots[0].Valid && sf.Slots[1].Valid {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	rf := &runFile{f: f, w: slotrec.NewWriter(f, sf.SlotSize, sf.Newest, sf.Seq()), last: bytes.Clone(sf.Payload())}
	return rf, rec, nil
}

// write puts rec into the slot that does not hold the newest durable
// record; with sync, fsyncs it. A record that outgrew its slot is written
// into a new, bigger file through renameio instead (durably: file and
// directory), which is then what rf updates.
func (s records) writeRunFile(dir *os.Root, rf *runFile, rec *record.Run, sync bool) error {
	payload, err := rec.Encode()
	if err != nil {
		return err
	}
	err = rf.w.Write(payload, sync)
	if errors.Is(err, slotrec.ErrTooBig) {
		return s.growRunFile(dir, rf, payload)
	}
	if err != nil {
		return err
	}
	rf.last = payload
	return nil
}

// growRunFile replaces a run's slot file by a bigger one holding payload.
// The rename replaces the name's file atomically; readers that opened the
// old one read its (older, valid) record.
func (s records) growRunFile(dir *os.Root, rf *runFile, payload []byte) error {
	seq := rf.w.Seq() + 1
	data, err := slotrec.Encode(payload, seq, 0)
	if err != nil {
		return err
	}
	name, err := nameOf(rf.f)
	if err != nil {
		return err
	}
	f, err := s.placeRunFile(dir, name, data)
	if err != nil {
		return err
	}
	rf.close()
	rf.f, rf.w, rf.last = f, slotrec.NewWriter(f, len(data)/2, 0, seq), payload
	return nil
}

// nameOf is the base name an open record file was opened by.
func nameOf(f *os.File) (string, error) {
	n := f.Name()
	for i := len(n) - 1; i >= 0; i-- {
		if n[i] == '/' {
			n = n[i+1:]
			break
		}
	}
	if n == "" {
		return "", errors.New("record file without a name")
	}
	return n, nil
}

// finishRunFile makes rec, final, durable in the run's own slot file (one
// fsync; nothing is created, so a full disk cannot stop it) and moves the
// file among the finished runs. The move is not made durable: if a crash
// loses it, the active set holds a file whose newest record is final,
// which every reader treats as finished (it holds no slot) and the next
// finalizer (admission's reaping, crew recover) moves. A shard that is
// new is made durably, as before.
func (s records) finishRunFile(active *os.Root, rf *runFile, rec *record.Run) error {
	payload, err := rec.Encode()
	if err != nil {
		return err
	}
	if bytes.Equal(payload, rf.last) {
		err = rf.w.Sync() // written already (KeepOutcome, an earlier try): durable now
	} else {
		err = s.writeRunFile(active, rf, rec, true)
	}
	if err != nil {
		return fmt.Errorf("record run %s as %s in %s: %w", rec.RunID, rec.State, s.display(activeDir, recordName(rec.RunID)), unwrapPath(err))
	}
	failpoint.Hit(failpoint.FinalSynced)
	shard := shardDir(rec.RunID)
	name := recordName(rec.RunID)
	// What a full disk can fail from here on is the move (a new shard, a
	// new block of its directory): the final record is durable already.
	if err := failpoint.Error(failpoint.FinishWrite); err != nil {
		return fmt.Errorf("record run %s as %s in %s: %w", rec.RunID, rec.State, s.display(shard), err)
	}
	// Indexed before it leaves the active set, as indexAndLeave does:
	// a reader lists the active set, then reads the index, so a run is
	// always in one or the other. Moved first, it was in neither for a
	// moment, and crew wait TASK said the task had no runs. An entry the
	// index could not take is added by crew recover's check of the index
	// (the record is in runs/done by then).
	s.index.Append(rec)
	failpoint.Hit(failpoint.Indexed)
	if !holdsFile(active, name, rf.f) {
		// Something else was put at the name (the file crew placed was
		// removed or replaced): the rename would move that. The final
		// record is written among the finished runs anew, and whatever
		// stands at the name is set aside.
		if err := s.writeDone(rec); err != nil {
			return err
		}
		if _, err := active.Lstat(name); err == nil {
			why := "it stood at the name of a run's record, which crew had not put there"
			if _, err := s.quarantine(activeDir, name, why, "crew (finishing the run)"); err != nil {
				return err
			}
		}
		return nil
	}
	// crew prune removes empty shard directories; if it removes this one
	// between our mkdir and our rename, make it again.
	for attempt := 0; ; attempt++ {
		dir, err := s.ensureShard(shard)
		if err == nil {
			err = renameBetween(active, name, dir, name)
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

// reserveRecord makes a new run's provisioning record durable in the
// active set, as a slot file.
func (s records) reserveRecord(rec *record.Run) (*runFile, error) {
	if err := s.upgradeRoot(); err != nil {
		return nil, fmt.Errorf("reserve run %s: %w", rec.RunID, err)
	}
	dir, err := s.layout(activeDir)
	var rf *runFile
	if err == nil {
		rf, err = s.createRunFile(dir, rec)
	}
	if err != nil {
		return nil, fmt.Errorf("record run %s as %s in %s: %w", rec.RunID, rec.State, s.display(activeDir), unwrapPath(err))
	}
	return rf, nil
}

// runFile is the run's record file open for writing, opened now if this
// process has not yet (a detached supervisor, a fence); nil, without an
// error, for a run whose record is an older crew's JSON record. A file
// at the name that cannot be opened and read as a slot file (another
// user's, unreadable, not a slot file) is replaced by a new one holding
// rec, durably, when rec is given: it is what the caller is about to
// write, and the run's locks are held.
func (l *RunLocks) runFile(rec *record.Run) (*runFile, *os.Root, error) {
	dir, err := l.s.layout(activeDir)
	if err != nil {
		return nil, nil, err
	}
	if l.rf != nil {
		return l.rf, dir, nil
	}
	name, err := findRecord(dir, l.id)
	switch {
	case errors.Is(err, fs.ErrNotExist) && rec != nil:
		// Gone from under its holder (moved aside by hand): the record is
		// made anew, as a record file, below.
		name, err = recordName(l.id), errNoRecordFile
	case errors.Is(err, fs.ErrNotExist):
		return nil, dir, nil
	case err != nil:
		return nil, nil, err
	case name != recordName(l.id):
		return nil, dir, nil
	}
	var rf *runFile
	if err == nil {
		rf, _, err = openRunFile(dir, name)
	}
	if err != nil && rec != nil {
		var placed *os.File
		var data []byte
		if data, err = EncodeRecordFile(rec); err == nil {
			placed, err = l.s.placeRunFile(dir, name, data)
		}
		if err == nil {
			payload, _ := rec.Encode()
			rf = &runFile{f: placed, w: slotrec.NewWriter(placed, len(data)/2, 0, 1), last: payload}
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open run record %s: %w", l.s.display(activeDir, name), unwrapPath(err))
	}
	l.rf = rf
	return rf, dir, nil
}

// errNoRecordFile: the run has no record file to open.
var errNoRecordFile = errors.New("no record file")

// write records rec, still active, in the run's record: in place, into
// the slot that does not hold the newest durable record; with sync, made
// durable. A JSON record of an older crew is replaced as that crew did.
func (l *RunLocks) write(rec *record.Run, sync bool) error {
	if rec.RunID != l.id {
		return fmt.Errorf("update run %s with the locks of run %s", rec.RunID, l.id)
	}
	rf, dir, err := l.runFile(rec)
	if err != nil {
		return fmt.Errorf("record run %s as %s: %w", rec.RunID, rec.State, err)
	}
	if rf == nil {
		how := atomic
		if sync {
			how = durable
		}
		return l.s.writeActive(rec, how)
	}
	if err := l.s.writeRunFile(dir, rf, rec, sync); err != nil {
		return fmt.Errorf("record run %s as %s in %s: %w", rec.RunID, rec.State, l.s.display(activeDir, recordName(l.id)), unwrapPath(err))
	}
	return nil
}

// finish makes rec, final, durable and moves it among the finished runs,
// then indexes it: in the run's own file if it has one; else (a JSON
// record of an older crew, or none left) as a new finished record, the
// active one removed after.
func (l *RunLocks) finish(rec *record.Run) error {
	rf, dir, err := l.runFile(rec)
	if err != nil {
		return fmt.Errorf("record run %s as %s: %w", rec.RunID, rec.State, err)
	}
	if rf == nil {
		return l.s.finish(rec)
	}
	if rec.State.Active() {
		return fmt.Errorf("finish run %s: state %s is not final", rec.RunID, rec.State)
	}
	if err := l.s.finishRunFile(dir, rf, rec); err != nil {
		return err
	}
	failpoint.Hit(failpoint.Finalized)
	return l.s.RemoveStopRequest(rec.RunID)
}

// keepInRunFile makes rec durable in the run's own file, unless it is
// what the file's newest slot holds already (made durable by Finish).
func (s records) keepInRunFile(dir *os.Root, rf *runFile, rec *record.Run) error {
	payload, err := rec.Encode()
	if err != nil {
		return err
	}
	if bytes.Equal(payload, rf.last) {
		return rf.w.Sync()
	}
	return s.writeRunFile(dir, rf, rec, true)
}

// holdsFile reports whether name in dir is the file f (not a link, nor a
// file put there since f was opened).
func holdsFile(dir *os.Root, name string, f *os.File) bool {
	lfi, err := dir.Lstat(name)
	if err != nil || !lfi.Mode().IsRegular() {
		return false
	}
	fi, err := f.Stat()
	return err == nil && os.SameFile(fi, lfi)
}

// DecodeRecord decodes a run's record file, of either format: what every
// reader of the store uses (and tests and tools that read a state root
// as an outsider would).
func DecodeRecord(data []byte) (*record.Run, error) { return decodeRecord(data) }

// EncodeRecordFile renders rec as a new record file, as crew writes one
// at reservation (one slot holds it; the other is room).
func EncodeRecordFile(rec *record.Run) ([]byte, error) {
	payload, err := rec.Encode()
	if err != nil {
		return nil, err
	}
	return slotrec.Encode(payload, 1, 0)
}
