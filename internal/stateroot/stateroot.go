// Package stateroot is what the packages that keep a part of crew's state
// root share, so that none of them imports package runstore (which imports
// them): the handle through which each reaches its directory (Dir, which
// runstore implements over the one *os.Root it opens, so that every access
// still goes through it), and the names every listing of the root agrees
// on. It does no I/O of its own.
package stateroot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/google/renameio/v2"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
)

// Dir is one directory of the state root's layout, as package runstore
// hands it to the package that keeps the files in it (logs/ to runlog,
// queue/ to queue, runs/ to finishindex). Every directory it opens is
// opened through the state root's *os.Root and checked as runstore checks
// its own (never through a symbolic link, never one someone untrusted can
// write), and files are made with the state root's modes, private or
// shared with a group.
type Dir interface {
	// Open opens the directory, or the directory sub below it (one name
	// per level), anew: the caller closes it. It is never cached, since
	// another process may remove a directory and make it again. A missing
	// directory, or state root, is fs.ErrNotExist; anything else at its
	// name is a *NotDirError; a directory someone untrusted can write is
	// refused.
	Open(sub ...string) (*os.Root, error)
	// OpenIn opens the directory name in parent (this directory, open),
	// checked as Open checks.
	OpenIn(parent *os.Root, name string) (*os.Root, error)
	// Mkdir makes the directory name in parent with the state root's
	// directory mode, exactly; fs.ErrExist if something is there.
	Mkdir(parent *os.Root, name string) error
	// Path is the full path of the directory, or of names below it, for
	// messages only: nothing ever opens it.
	Path(names ...string) string
	// FilePerm is the mode crew gives the files it makes here.
	FilePerm() os.FileMode
	// WriteFile replaces name in dir with data atomically (a temporary
	// file beside it, fsynced, renamed over it; no directory fsync).
	WriteFile(dir *os.Root, name string, data []byte) error
	// ReplaceFile is WriteFile for a file nothing may keep crew from
	// writing: a directory planted at name is moved into quarantine/
	// first.
	ReplaceFile(dir *os.Root, name string, data []byte) error
	// PendingFile starts an atomic replace of name in dir, as WriteFile
	// makes one, for a writer that needs the temporary file's descriptor.
	PendingFile(dir *os.Root, name string) (*renameio.PendingFile, error)
	// Quarantine moves name (of any type: a link is moved, never
	// followed) from this directory into quarantine/, next to a note that
	// says why and who moved it (by), and returns its new path.
	Quarantine(name, why, by string) (string, error)
	// PublishLock makes a lock file appear at name in dir already locked
	// by this process, with the state root's file mode; fs.ErrExist if
	// name exists.
	PublishLock(dir *os.Root, name string) (*lockfs.Lock, error)
	// Probe says whether a living process holds the lock file name in
	// dir (Unknown, and why, when the probe fails).
	Probe(dir *os.Root, name string) (record.Liveness, error)
	// Remove removes name from dir; a missing file is not an error.
	Remove(dir *os.Root, name string) error
	// List lists dir's entry names, unsorted.
	List(dir *os.Root) ([]string, error)
	// ListSome reads at most n names of dir; complete says it read to the
	// end.
	ListSome(dir *os.Root, n int) (names []string, complete bool, err error)
	// TempName is a fresh temporary name beside name, for a file that is
	// linked into place (never over another) rather than renamed.
	TempName(name string) string
}

// NotDirError is a name of the layout where a directory belongs that is
// something else (a file, a symbolic link, a FIFO): what Dir.Open refuses.
type NotDirError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotDirError) Error() string {
	return fmt.Sprintf("%s is %s, not a directory; move it out of the way", e.Path, rootfs.Kind(e.Mode))
}

// IsTempName reports whether a directory entry is a leftover temporary
// file of an interrupted atomic write (or any other dot-file); listings
// skip them and recovery sweeps them.
func IsTempName(name string) bool { return len(name) > 0 && name[0] == '.' }

// A run's record is one file, in the active set and among the finished
// runs alike: <id>.run (a slot file, package slotrec), which crew writes
// since state-root version 2, or <id>.json (a JSON record), which older
// crews wrote and which stays in the history. These functions are the one
// place that knows the two names; every listing of runs/ agrees through
// them.
const (
	RecordExt   = ".run"
	V1RecordExt = ".json"
)

// RecordName is the file name crew gives run id's record.
func RecordName(id record.RunID) string { return string(id) + RecordExt }

// V1RecordName is the file name of run id's record as older crews wrote it.
func V1RecordName(id record.RunID) string { return string(id) + V1RecordExt }

// RecordNames are the names run id's record may have, the current one
// first.
func RecordNames(id record.RunID) [2]string { return [2]string{RecordName(id), V1RecordName(id)} }

// CutRecordName is the run id a record's file name says, if it is one:
// <run-id>.run or <run-id>.json.
func CutRecordName(name string) (record.RunID, bool) {
	id, ok := strings.CutSuffix(name, RecordExt)
	if !ok {
		id, ok = strings.CutSuffix(name, V1RecordExt)
	}
	if !ok || !record.LooksLikeRunID(id) {
		return "", false
	}
	return record.RunID(id), true
}

// RecordID is the run id of a name CutRecordName accepted.
func RecordID(name string) record.RunID {
	id, _ := CutRecordName(name)
	return id
}

// StatRecord is the Lstat of run id's record in dir, under either name,
// and the name it has.
func StatRecord(dir *os.Root, id record.RunID) (os.FileInfo, string, error) {
	var first error
	for _, name := range RecordNames(id) {
		fi, err := dir.Lstat(name)
		if err == nil {
			return fi, name, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, "", first
}

// UnwrapPath keeps the syscall error and the path without Go's operation
// prefix repeated in every wrap.
func UnwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}
