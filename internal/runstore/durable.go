package runstore

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/rootfs"
)

// durability says how far a write goes before it returns.
type durability int

const (
	// volatile: atomic (readers never see a torn file) but nothing is
	// fsynced; for files that mean nothing after a crash.
	volatile durability = iota
	// atomic: the file is fsynced and renamed into place; after a power
	// loss the name may still hold the old content, never a torn file.
	atomic
	// durable: atomic, and the directory is fsynced so the rename itself
	// survives a power loss.
	durable
)

// writeFile replaces name in dir with data. The temporary file is created
// beside it as .<name><random> (listings skip dot-files; recovery sweeps
// them), exclusively, so a planted file or link is never written through.
//
// google/renameio does the same for paths, but cannot work through an
// *os.Root, which is what keeps every write inside the state root.
func writeFile(dir *os.Root, name string, data []byte, how durability) error {
	return writeFileMode(dir, name, data, how, FilePerm)
}

// writeFileMode is writeFile for a file of mode perm.
func writeFileMode(dir *os.Root, name string, data []byte, how durability, perm os.FileMode) error {
	tmp, err := tempName(name)
	if err != nil {
		return err
	}
	f, err := rootfs.Open(dir, tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	var serr error
	if how >= atomic && werr == nil {
		serr = f.Sync()
	}
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = dir.Remove(tmp)
		return err
	}
	if err := dir.Rename(tmp, name); err != nil {
		_ = dir.Remove(tmp)
		return err
	}
	if how == durable {
		return syncDir(dir)
	}
	return nil
}

func tempName(name string) (string, error) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	return "." + name + hex.EncodeToString(b[:]), nil
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
