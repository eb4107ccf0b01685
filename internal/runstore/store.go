// Package runstore is the local state root: the only code that touches it.
// It opens the root once as an *os.Root and does every open, create,
// rename, remove and listing through it (files through package rootfs:
// regular files only, no symbolic links, bounded reads), so no name read
// from the state root can lead crew outside it. It owns the layout, the
// durable writes, the run records and their locks, the queue's tickets and
// bells, the logs, and the listings recovery sweeps.
//
// Layout of a state root:
//
//	crew.json                          config (optional)
//	.locks/dispatch-admission.lock     the admission lock (admission.go); never removed
//	.locks/dispatch-admission.holder   who holds it (pid, host, since)
//	runs/active/<run-id>.json          records of runs that may hold a slot
//	runs/done/<yyyy-mm-ddThh>/<run-id>.json  finished runs, by creation hour (UTC)
//	runs/finished.idx                  finished runs in finish order (derived; finishindex.go)
//	owners/<run-id>.lock               owner locks (held by supervisor and command)
//	owners/<run-id>.supervisor.lock    held by the supervisor alone
//	owners/<run-id>.stop               who asked `crew stop` to stop the run
//	logs/<run-id>.log                  the command's output
//	quarantine/                        unreadable records moved aside by recovery
//	queue/<run-id>.json                tickets of waiting starts (--wait), in arrival order
//	queue/<run-id>.lock                held by the waiting process: a dead waiter's ticket is void
//	queue/<run-id>.bell                a FIFO the waiter sleeps on; rung when a slot may be its
//	refusals.log                       refused starts, one JSON line each
//
// No file name is ever derived from a task name. Names starting with "."
// are temporary files of interrupted atomic writes; listings skip them.
package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/crew-dev/crew/internal/finishindex"
	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/rootfs"
	"github.com/crew-dev/crew/internal/runlog"
	"github.com/crew-dev/crew/internal/stateroot"
)

// DirPerm and FilePerm are the modes of everything crew creates in a
// private state root (see owner.go for a shared one).
const (
	DirPerm  os.FileMode = 0o700
	FilePerm os.FileMode = 0o600
)

// Directories of the state root, relative to it.
const (
	locksDir      = ".locks"
	runsDir       = "runs"
	activeDir     = "runs/active"
	doneDir       = "runs/done"
	ownersDir     = "owners"
	logsDir       = "logs"
	quarantineDir = "quarantine"
	queueDir      = "queue"
)

// layoutDirs are created by Ensure, parents first.
var layoutDirs = []string{locksDir, "runs", activeDir, doneDir, ownersDir, logsDir, queueDir}

const (
	configName = "crew.json"
	holderName = "dispatch-admission.holder"
	// admissionLockName is the admission lock, in .locks/.
	admissionLockName = "dispatch-admission.lock"
	refusalsName      = "refusals.log"
)

// Store is one state root. Its methods are safe for concurrent use.
type Store struct {
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
	logs          *runlog.Logs       // logs/
	queue         *queue.Queue       // queue/
	index         *finishindex.Index // runs/finished.idx, runs/done.index, the walk over runs/done/
}

// New returns the store of the state root at path (absolute). It touches
// nothing on disk: reading a state root that does not exist creates
// nothing, and only Ensure creates it.
func New(path string) *Store {
	s := &Store{path: path}
	s.logs = runlog.New(dirHandle{s, logsDir})
	s.queue = queue.New(dirHandle{s, queueDir})
	s.index = finishindex.New(dirHandle{s, runsDir}, dirHandle{s, doneDir}, finishedRecords{s}, s.logs)
	return s
}

// Logs are the runs' logs, in logs/.
func (s *Store) Logs() *runlog.Logs { return s.logs }

// Queue is the queue of waiting starts, in queue/.
func (s *Store) Queue() *queue.Queue { return s.queue }

// FinishIndex is what the state root knows of its finished runs as a
// whole: their walk, the index of the order they finished in, and the
// done index of what each shard holds.
func (s *Store) FinishIndex() *finishindex.Index { return s.index }

// Root is the state root's path, for messages and the environment of runs.
func (s *Store) Root() string { return s.path }

// display is the full path of a file of the state root, for messages only:
// nothing ever opens it.
func (s *Store) display(rel ...string) string {
	return filepath.Join(append([]string{s.path}, rel...)...)
}

// ErrNoRoot means the state root does not exist (yet).
var ErrNoRoot = errors.New("state root does not exist")

// Ensure creates the state root's directories if they are missing and
// opens the root.
func (s *Store) Ensure() error {
	if err := os.MkdirAll(s.path, DirPerm); err != nil {
		return fmt.Errorf("create state root %s: %w", s.path, unwrapPath(err))
	}
	r, err := s.openRoot()
	if err != nil {
		return err
	}
	s.mu.Lock()
	checked := s.layoutChecked
	s.layoutChecked = false
	s.mu.Unlock()
	if checked {
		// Opening the root has just checked every directory of the
		// layout, and all were there: looking again is 7 path walks of
		// every start for nothing. Only once: later calls (a waiter's
		// next attempt) look again, and make what was removed meanwhile.
		return nil
	}
	for _, dir := range layoutDirs {
		fi, err := r.Lstat(dir)
		switch {
		case err == nil && fi.IsDir():
			if err := s.checkDir(fi, s.display(dir), false); err != nil {
				return err
			}
			continue
		case err == nil:
			return fmt.Errorf("state root %s: %s is %s, not a directory; move it out of the way",
				s.path, s.display(dir), rootfs.Kind(fi.Mode()))
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("state root %s: %w", s.path, unwrapPath(err))
		}
		err = s.mkdir(r, dir)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create state root %s: %w", s.path, unwrapPath(err))
		}
		if err == nil && dir == doneDir {
			s.index.Create() // no finished runs yet: an empty index is complete
		}
	}
	return nil
}

// openRoot opens the state root once; ErrNoRoot if it does not exist, an
// *UnsafeRootError if someone untrusted can write it (owner.go).
func (s *Store) openRoot() (*os.Root, error) {
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
func (s *Store) dir(rel string) (*os.Root, error) {
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
func (s *Store) checkLayout(r *os.Root, fi os.FileInfo) (complete bool, err error) {
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
func (s *Store) openDir(parent *os.Root, rel, display string) (*os.Root, error) {
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
func (s *Store) Close() error {
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
func (s *Store) Exists() bool {
	_, err := s.openRoot()
	return !errors.Is(err, ErrNoRoot)
}

// unwrapPath keeps the syscall error and the path without Go's operation
// prefix repeated in every wrap.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

// IsTempName reports whether a directory entry is a leftover temporary
// file of an interrupted atomic write (or any other dot-file); listings
// skip them and recovery sweeps them.
func IsTempName(name string) bool { return len(name) > 0 && name[0] == '.' }
