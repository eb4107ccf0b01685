package runstore

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"

	"github.com/google/renameio/v2"
	"golang.org/x/sys/unix"
)

// durability says how far a write goes before it returns.
type durability int

const (
	// atomic: the file is fsynced and renamed into place; after a power
	// loss the name may still hold the old content, never a torn file.
	atomic durability = iota
	// durable: atomic, and the directory is fsynced so the rename itself
	// survives a power loss.
	durable
)

// writeFileMode replaces name in dir with data, a file of mode perm
// (exactly, whatever the umask), through github.com/google/renameio/v2:
// WithRoot creates the temporary file beside name, inside dir's root, as
// .<name><digits> (exclusively, so a planted file or link is never
// written through; listings skip dot-files, recovery sweeps them),
// fsyncs it and renames it over name. durable adds what renameio leaves to
// its caller: the directory's fsync, so the rename itself survives a power
// loss.
func writeFileMode(dir *os.Root, name string, data []byte, how durability, perm os.FileMode) error {
	pf, err := renameio.NewPendingFile(name, renameio.WithRoot(dir), renameio.WithStaticPermissions(perm))
	if err != nil {
		return err
	}
	defer pf.Cleanup() // removes the temporary file unless it was renamed
	if _, err := pf.Write(data); err != nil {
		return err
	}
	if err := pf.CloseAtomicallyReplace(); err != nil {
		return err
	}
	if how == durable {
		return syncDir(dir)
	}
	return nil
}

// pendingFile starts an atomic replace of name in dir the way writeFileMode
// makes one, for a writer that needs the temporary file's descriptor.
func (s *Store) pendingFile(dir *os.Root, name string) (*renameio.PendingFile, error) {
	return renameio.NewPendingFile(name, renameio.WithRoot(dir), renameio.WithStaticPermissions(s.filePerm()))
}

// tempName is a fresh temporary name beside name, for a file that is
// linked into place (never over another) rather than renamed.
func tempName(name string) string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	return "." + name + hex.EncodeToString(b[:])
}

// replaceFile is writeFile for the Store: the file gets the state root's
// file mode, and a directory planted where the file belongs (rename cannot
// replace it) is moved aside into quarantine/ first, so that it cannot
// keep a run from being recorded. A link, FIFO or any other file at the
// name is simply replaced: rename swaps the name, never writes through it.
// rel is dir's place in the layout, for the quarantine.
func (s *Store) replaceFile(rel string, dir *os.Root, name string, data []byte, how durability) error {
	err := writeFileMode(dir, name, data, how, s.filePerm())
	if err == nil {
		return nil
	}
	if fi, lerr := dir.Lstat(name); lerr != nil || !fi.IsDir() {
		return err
	}
	if _, qerr := s.quarantine(rel, name, "a directory stood where crew writes a file", "crew"); qerr != nil {
		return errors.Join(err, qerr)
	}
	return writeFileMode(dir, name, data, how, s.filePerm())
}

// renameBetween renames oldName in from to newName in to, relative to the
// two directories' own descriptors: no path is resolved again, so no link
// planted in a path can redirect the move.
func renameBetween(from *os.Root, oldName string, to *os.Root, newName string) error {
	fd, err := from.Open(".")
	if err != nil {
		return err
	}
	defer fd.Close()
	td, err := to.Open(".")
	if err != nil {
		return err
	}
	defer td.Close()
	if err := unix.Renameat(int(fd.Fd()), oldName, int(td.Fd()), newName); err != nil {
		return &os.LinkError{Op: "rename", Old: oldName, New: newName, Err: err}
	}
	return nil
}

// syncDir makes the directory's entries (creations, renames, removals)
// durable.
func syncDir(dir *os.Root) error {
	d, err := dir.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}

// removeFile removes name from dir; a missing file is not an error.
func removeFile(dir *os.Root, name string) error {
	if err := dir.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// listNames lists a directory's entry names, unsorted (cheaper than a
// sorted, stat-ing listing).
func listNames(dir *os.Root) ([]string, error) {
	d, err := dir.Open(".")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// listSomeNames reads at most n names of a directory (in the order the
// filesystem gives them); complete says that it read to the end, which it
// does not try when it has n.
func listSomeNames(dir *os.Root, n int) (names []string, complete bool, err error) {
	d, err := dir.Open(".")
	if err != nil {
		return nil, false, err
	}
	defer d.Close()
	for len(names) < n {
		batch, err := d.Readdirnames(n - len(names))
		names = append(names, batch...)
		if errors.Is(err, io.EOF) {
			return names, true, nil
		}
		if err != nil {
			return nil, false, err
		}
	}
	return names, false, nil // n read; whether more follow is not asked
}
