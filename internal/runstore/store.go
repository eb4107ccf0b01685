// Package runstore is the local state root: the only code that touches it,
// itself or through the packages it hands a part of the root to. It opens
// the root once as an *os.Root and does every open, create, rename, remove
// and listing through it (files through package rootfs: regular files
// only, no symbolic links, bounded reads), so no name read from the state
// root can lead crew outside it. It owns the root, the layout, the durable
// writes, the run records and their locks, stop requests, and the listings
// recovery sweeps; the runs' logs (package runlog), the queue's tickets
// and bells (package queue) and what is known of the finished runs as a
// whole (package finishindex) are kept by packages of their own, which
// reach their directories only through the handle runstore gives them
// (stateroot.Dir, handle.go).
//
// Layout of a state root:
//
//	crew.json                          config (optional)
//	.locks/dispatch-admission.lock     the admission lock (admission.go); never removed
//	.locks/dispatch-admission.holder   who holds it (pid, host, since)
//	runs/active/<run-id>.json          records of runs that may hold a slot
//	runs/active.index                  what admission needs of each reserved run (derived; activeindex.go)
//	runs/done/<yyyy-mm-ddThh>/<run-id>.json  finished runs, by creation hour (UTC)
//	runs/finished.idx                  finished runs in finish order (derived; package finishindex)
//	runs/done.index                    what each hour of finished runs holds (derived; package finishindex)
//	owners/<run-id>.lock               owner locks (held by supervisor and command)
//	owners/<run-id>.supervisor.lock    held by the supervisor alone
//	owners/<run-id>.stop               who asked `crew stop` to stop the run
//	logs/<run-id>.log                  the command's output (package runlog)
//	logs/<run-id>.tail/                the newest output of a capped log, in pieces, until it ends
//	quarantine/                        unreadable records moved aside by recovery
//	queue/<run-id>.json                tickets of waiting starts (--wait), in arrival order (package queue)
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
	syncatomic "sync/atomic"

	"github.com/crew-dev/crew/internal/finishindex"
	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/rootfs"
	"github.com/crew-dev/crew/internal/runlog"
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
//
// It is put together from parts, each a type of its own: the root itself
// (rootDir: opening it, who may write it, the modes of what crew makes,
// quarantine; root.go, owner.go, quarantine.go), the run records (records:
// the active set and the finished shards; records.go, finished.go,
// scan.go, activeindex.go), stop requests (stops: files.go), what proves
// which processes and user a run has (procs: runprocs.go, rights.go) and
// what crashes left behind (sweep: leftovers.go); the admission lock, the
// run locks and the durable writes are the Store's own (admission.go,
// locks.go, durable.go). Each part but the root reaches the rest through
// the Store it is part of. The packages that keep their own parts of the
// root take its handle (handle.go): the logs (runlog), the queue (queue)
// and what is known of the finished runs as a whole (finishindex).
type Store struct {
	rootDir
	records
	stops
	procs
	sweep

	logs  *runlog.Logs       // logs/
	queue *queue.Queue       // queue/
	index *finishindex.Index // runs/finished.idx, runs/done.index, the walk over runs/done/

	// upgraded: this process has seen crew.json at ConfigVersion (or made
	// it so), so its reservations may write slot files (upgrade.go).
	upgraded syncatomic.Bool
}

// The parts of a Store other than its root.
type (
	records struct{ *Store }
	stops   struct{ *Store }
	procs   struct{ *Store }
	sweep   struct{ *Store }
)

// New returns the store of the state root at path (absolute). It touches
// nothing on disk: reading a state root that does not exist creates
// nothing, and only Ensure creates it.
func New(path string) *Store {
	s := &Store{rootDir: rootDir{path: path}}
	s.records, s.stops, s.procs, s.sweep = records{s}, stops{s}, procs{s}, sweep{s}
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
