package runstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// WriteDurable replaces path with data so that after a crash at any point
// the path holds either the old content or the new, never a torn or empty
// file: the temporary file (in the same directory, named .<name><digits>)
// is fsynced and renamed into place, and then the directory is fsynced so
// the rename itself survives a power loss — renameio does not do that.
func WriteDurable(path string, data []byte) error {
	if err := WriteAtomic(path, data); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// WriteAtomic is WriteDurable without the directory fsync: after a power
// loss the path may still hold the old content, but never a torn file. It
// is for replacing a record whose older version is also a truthful (if
// less complete) account, where the caller does not act on the new one.
func WriteAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	t, err := renameio.TempFile(dir, path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPath(err))
	}
	defer t.Cleanup()
	if _, err := t.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPath(err))
	}
	if err := t.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPath(err))
	}
	return nil
}

// WriteVolatile replaces path atomically but makes nothing durable: for
// files that mean nothing after a crash (a queue ticket is void once its
// waiter is gone, and a power loss takes every waiter with it). Readers
// still never see a torn file while the machine runs.
func WriteVolatile(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPath(err))
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, unwrapPath(err))
	}
	return nil
}

// SyncDir makes the directory's entries (creations, renames, removals)
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", unwrapPath(err))
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// IsTempName reports whether a directory entry is a leftover temporary
// file of an interrupted atomic write (or any other dot-file); listings
// skip them and recovery sweeps them.
func IsTempName(name string) bool { return len(name) > 0 && name[0] == '.' }
