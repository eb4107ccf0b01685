package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
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
	// kept are the layout's directories as this process opened them
	// (layout), and retired the ones found replaced since, closed with
	// the store: another goroutine may still be using one.
	kept    map[string]keptDir
	retired []*os.Root
	euidVal int // os.Geteuid, asked once (checkDirAs runs at every access)
}

// keptDir is a directory of the layout opened once, and what it was
// when opened: each use checks that its name still leads to it.
type keptDir struct {
	root *os.Root
	fi   os.FileInfo
}

// keepable are the directories of the layout a process opens once and
// keeps (layout): they are made with the root and never removed by crew.
// Shards of finished runs are not: crew prune removes empty ones.
var keepable = map[string]string{ // name → its parent ("." for the root)
	locksDir: ".", "runs": ".", activeDir: "runs", doneDir: "runs",
	ownersDir: ".", logsDir: ".", queueDir: ".", quarantineDir: ".",
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

// dir opens a directory of the state root anew; the caller closes it. It
// is for those a process does not keep (layout): shards of finished runs,
// which crew prune removes, and what other packages open through
// dirHandle. A missing directory, or a missing root, is fs.ErrNotExist; a
// directory replaced by anything else (a symbolic link, a file) is refused.
// One inside a directory this process keeps (a shard in runs/done) is
// opened from the kept handle, checked as layout checks it, rather than by
// walking its whole path from the root anew: a status over a long history
// opens dozens of shards, each of which cost a dozen system calls that way.
func (s *rootDir) dir(rel string) (*os.Root, error) {
	if parent, base := path.Split(rel); parent != "" {
		if _, kept := keepable[path.Clean(parent)]; kept {
			p, err := s.layout(path.Clean(parent))
			if err != nil {
				return nil, err
			}
			return s.openDir(p, base, s.display(rel))
		}
	}
	root, err := s.openRoot()
	if errors.Is(err, ErrNoRoot) {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, err
	}
	return s.openDir(root, rel, s.display(rel))
}

// layout is a directory of the layout (keepable) as this process keeps it
// open: the caller must not close it. It is opened once; every later use
// checks, with one lstat per level, that the name still leads to the
// directory opened and that it may still be trusted (checkDir), and opens
// it anew when not: another process may remove a directory (anyone may
// remove runs/active) and make it again, and a handle kept from before
// would read and write an orphaned directory. That check is what opening
// it anew each time made (issue 25: a start reopened layout directories
// about 40 times, some 200 system calls). A missing directory, or a
// missing root, is fs.ErrNotExist; one replaced by anything else (a
// symbolic link, a file) is refused.
func (s *rootDir) layout(rel string) (*os.Root, error) {
	parentName, ok := keepable[rel]
	if !ok {
		return nil, fmt.Errorf("internal error: %s is not a directory of the layout crew keeps open", rel)
	}
	parent, err := s.openRoot()
	if errors.Is(err, ErrNoRoot) {
		return nil, fs.ErrNotExist
	}
	if err == nil && parentName != "." {
		parent, err = s.layout(parentName)
	}
	if err != nil {
		return nil, err
	}
	base := path.Base(rel)
	s.mu.Lock()
	k, have := s.kept[rel]
	s.mu.Unlock()
	if have {
		fi, err := parent.Lstat(base)
		if err != nil {
			return nil, unwrapPath(err)
		}
		if fi.IsDir() && os.SameFile(fi, k.fi) {
			if err := s.checkDir(fi, s.display(rel), false); err != nil {
				return nil, err
			}
			return k.root, nil
		}
	}
	d, err := s.openDir(parent, base, s.display(rel))
	if err != nil {
		return nil, err
	}
	fi, err := d.Stat(".")
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("open %s: %w", s.display(rel), unwrapPath(err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kept == nil {
		s.kept = make(map[string]keptDir)
	}
	if old, had := s.kept[rel]; had {
		s.retired = append(s.retired, old.root)
	}
	s.kept[rel] = keptDir{root: d, fi: fi}
	return d, nil
}

// euid is the effective user id of this process, asked of the kernel once.
func (s *rootDir) euid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.euidVal == 0 {
		s.euidVal = os.Geteuid() + 1 // 0: not asked yet
	}
	return s.euidVal - 1
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
	for _, k := range s.kept {
		k.root.Close()
	}
	for _, r := range s.retired {
		r.Close()
	}
	s.kept, s.retired = nil, nil
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
