package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/crew-dev/crew/internal/stateroot"
)

// rootDir is the state root itself: the one *os.Root every access goes
// through, who may write it (owner.go), and the modes of what crew makes
// in it. Its methods name it s, as the Store's do: it is the store's root.
type rootDir struct {
	path string

	mu      sync.Mutex
	root    *os.Root
	sharing sharing // the group crew.json shares the root with, if any
	// sharingNow: crew init --group is sharing the root; a group-writable
	// directory is about to be converted, not refused (see PrepareSharing).
	sharingNow bool
	// layoutChecked: opening the root has just found every directory of
	// the layout in place and checked it; the next Ensure need not look.
	layoutChecked bool
}

// ErrNoRoot means the state root does not exist (yet).
var ErrNoRoot = errors.New("state root does not exist")

// Root is the state root's path, for messages and the environment of runs.
func (s *rootDir) Root() string { return s.path }

// display is the full path of a file of the state root, for messages only:
// nothing ever opens it.
func (s *rootDir) display(rel ...string) string {
	return filepath.Join(append([]string{s.path}, rel...)...)
}

// openRoot opens the state root once; ErrNoRoot if it does not exist, an
// *UnsafeRootError if someone untrusted can write it (owner.go).
func (s *rootDir) openRoot() (*os.Root, error) {
	s.mu.Lock()
	if s.root != nil {
		defer s.mu.Unlock()
		return s.root, nil
	}
	s.mu.Unlock()
	r, err := os.OpenRoot(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoRoot
	}
	if err != nil {
		return nil, fmt.Errorf("open state root: %w", unwrapPath(err))
	}
	fi, err := r.Stat(".")
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("open state root: %w", unwrapPath(err))
	}
	sh := readSharing(r)
	s.mu.Lock()
	if !s.sharingNow {
		s.sharing = sh
	}
	s.mu.Unlock()
	complete, err := s.checkLayout(r, fi)
	if err != nil {
		r.Close()
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != nil {
		r.Close() // another goroutine opened it meanwhile
		return s.root, nil
	}
	s.root, s.layoutChecked = r, complete
	return r, nil
}

// dir opens a directory of the layout; the caller closes it. It is opened
// anew each time, never cached: another process may remove a directory
// (crew prune removes empty shards; anyone may remove runs/active) and make
// it again, and a handle kept from before would read and write an orphaned
// directory. A missing directory, or a missing root, is fs.ErrNotExist; a
// directory replaced by anything else (a symbolic link, a file) is refused.
func (s *rootDir) dir(rel string) (*os.Root, error) {
	root, err := s.openRoot()
	if errors.Is(err, ErrNoRoot) {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, err
	}
	return s.openDir(root, rel, s.display(rel))
}

// checkLayout checks the root (fi) and every directory of its layout
// that exists, so that a state root someone untrusted can write is refused
// whole, by every command, whichever of its directories the command would
// have used. Shards of finished runs are checked as they are opened.
// It reports whether every directory Ensure makes was there.
func (s *rootDir) checkLayout(r *os.Root, fi os.FileInfo) (complete bool, err error) {
	if err := s.checkDir(fi, s.path, true); err != nil {
		return false, err
	}
	complete = true
	for _, dir := range append(layoutDirs, quarantineDir) {
		fi, err := r.Lstat(dir)
		if err == nil && fi.IsDir() {
			if err := s.checkDir(fi, s.display(dir), false); err != nil {
				return false, err
			}
		} else if dir != quarantineDir {
			complete = false
		}
	}
	return complete, nil
}

// openDir opens rel in parent as a root of its own, refusing a symbolic
// link where a directory belongs (os.Root would follow one that stays
// inside the state root; crew never follows any), and a directory someone
// untrusted can write.
func (s *rootDir) openDir(parent *os.Root, rel, display string) (*os.Root, error) {
	fi, err := parent.Lstat(rel)
	if err != nil {
		return nil, unwrapPath(err)
	}
	if !fi.IsDir() {
		return nil, &stateroot.NotDirError{Path: display, Mode: fi.Mode()}
	}
	d, err := parent.OpenRoot(rel)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", display, unwrapPath(err))
	}
	opened, err := d.Stat(".")
	if err != nil || !os.SameFile(fi, opened) {
		d.Close()
		return nil, fmt.Errorf("%s was replaced while being opened", display)
	}
	if err := s.checkDir(opened, display, false); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Close releases the store's handle on the state root.
func (s *rootDir) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != nil {
		err := s.root.Close()
		s.root = nil
		return err
	}
	return nil
}

// Exists reports whether the state root exists (a root crew refuses to
// use exists: the next access says why it is refused).
func (s *rootDir) Exists() bool {
	_, err := s.openRoot()
	return !errors.Is(err, ErrNoRoot)
}

// dirOrRoot opens a directory of the layout, or "." for the state root
// itself; done releases it.
func (s *rootDir) dirOrRoot(rel string) (dir *os.Root, done func(), err error) {
	if rel == "." {
		dir, err = s.openRoot()
		return dir, func() {}, err
	}
	dir, err = s.dir(rel)
	if err != nil {
		return nil, nil, err
	}
	return dir, func() { dir.Close() }, nil
}

// unwrapPath keeps the syscall error and the path without Go's operation
// prefix repeated in every wrap (stateroot.UnwrapPath).
func unwrapPath(err error) error { return stateroot.UnwrapPath(err) }
