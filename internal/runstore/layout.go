// Package runstore owns the state root: where every file lives, the run
// records and config stored there, and the durable writes that keep them
// truthful through crashes.
//
// Layout of a state root:
//
//	crew.json                          config (optional)
//	.locks/dispatch-admission.lock     the admission lock; never deleted
//	.locks/dispatch-admission.holder   who holds it (pid, host, since)
//	runs/active/<run-id>.json          records of runs that may hold a slot
//	runs/done/<yyyy-mm-ddThh>/<run-id>.json  finished runs, by creation hour (UTC)
//	owners/<run-id>.lock               owner locks (held by supervisor and command)
//	owners/<run-id>.supervisor.lock    held by the supervisor alone
//	owners/<run-id>.stop               who asked `crew stop` to stop the run
//	logs/<run-id>.log                  the command's output
//	quarantine/                        unreadable records moved aside by recovery
//	queue/<run-id>.json                tickets of waiting starts (--wait), in arrival order
//	queue/<run-id>.lock                held by the waiting process: a dead waiter's ticket is void
//	queue/<run-id>.bell                a FIFO the waiter sleeps on; rung when a slot may be its
//
// No file name is ever derived from a task name.
package runstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DirPerm and FilePerm are the modes of everything crew creates.
const (
	DirPerm  os.FileMode = 0o700
	FilePerm os.FileMode = 0o600
)

// Layout maps a state root to the paths inside it.
type Layout struct {
	Root string
}

func (l Layout) ConfigPath() string { return filepath.Join(l.Root, "crew.json") }
func (l Layout) LocksDir() string   { return filepath.Join(l.Root, ".locks") }
func (l Layout) AdmissionLockPath() string {
	return filepath.Join(l.LocksDir(), "dispatch-admission.lock")
}
func (l Layout) AdmissionHolderPath() string {
	return filepath.Join(l.LocksDir(), "dispatch-admission.holder")
}
func (l Layout) ActiveDir() string     { return filepath.Join(l.Root, "runs", "active") }
func (l Layout) DoneDir() string       { return filepath.Join(l.Root, "runs", "done") }
func (l Layout) OwnersDir() string     { return filepath.Join(l.Root, "owners") }
func (l Layout) LogsDir() string       { return filepath.Join(l.Root, "logs") }
func (l Layout) QuarantineDir() string { return filepath.Join(l.Root, "quarantine") }
func (l Layout) QueueDir() string      { return filepath.Join(l.Root, "queue") }

func (l Layout) TicketPath(id RunID) string { return filepath.Join(l.QueueDir(), string(id)+".json") }
func (l Layout) TicketLockPath(id RunID) string {
	return filepath.Join(l.QueueDir(), string(id)+".lock")
}
func (l Layout) BellPath(id RunID) string { return filepath.Join(l.QueueDir(), string(id)+".bell") }

func (l Layout) ActivePath(id RunID) string   { return filepath.Join(l.ActiveDir(), string(id)+".json") }
func (l Layout) DoneShardDir(id RunID) string { return filepath.Join(l.DoneDir(), id.Shard()) }
func (l Layout) DonePath(id RunID) string {
	return filepath.Join(l.DoneShardDir(id), string(id)+".json")
}
func (l Layout) OwnerLockPath(id RunID) string {
	return filepath.Join(l.OwnersDir(), string(id)+".lock")
}
func (l Layout) SupervisorLockPath(id RunID) string {
	return filepath.Join(l.OwnersDir(), string(id)+".supervisor.lock")
}
func (l Layout) StopRequestPath(id RunID) string {
	return filepath.Join(l.OwnersDir(), string(id)+".stop")
}
func (l Layout) RefusalsPath() string    { return filepath.Join(l.Root, "refusals.log") }
func (l Layout) LogPath(id RunID) string { return filepath.Join(l.LogsDir(), string(id)+".log") }

// Ensure creates the state root's directories if they are missing. It is
// cheap when they exist: one stat for the deepest directory of each branch.
func (l Layout) Ensure() error {
	for _, dir := range []string{l.LocksDir(), l.ActiveDir(), l.DoneDir(), l.OwnersDir(), l.LogsDir(), l.QueueDir()} {
		if fi, err := os.Stat(dir); err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("state root %s: %s is not a directory; move it out of the way", l.Root, dir)
			}
			continue
		}
		if err := os.MkdirAll(dir, DirPerm); err != nil {
			return fmt.Errorf("create state root %s: %w", l.Root, unwrapPath(err))
		}
	}
	return nil
}

// unwrapPath keeps the syscall error and the path without Go's "mkdir"
// prefix noise repeated in every wrap.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}
