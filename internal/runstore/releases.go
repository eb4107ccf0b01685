package runstore

import (
	stdatomic "sync/atomic"

	"github.com/crew-dev/crew/internal/record"
)

// A waiting start must notice at once when a slot, or a place ahead of it
// in line, is freed without a word: a run or a waiting start killed with
// SIGKILL leaves no record changed and rings no bell. What does change is
// in the kernel: the last descriptor of the run's owner lock (held by its
// supervisor and inherited by its command, opened for writing) is closed
// when the last of them dies, and inotify tells of that close. A normal
// end removes the lock file before it lets go of it; a lock file still at
// its name when its last writer closes it was left by the dead. Probes
// open the locks read-only, and are not told of.

// ReleaseWatch tells of locks of the state root that lost their last
// holder while still in place (owners/), and of crew.json replaced (a
// config fixed by hand), on systems that can tell (Linux); elsewhere the
// waiters poll.
type ReleaseWatch struct {
	// C delivers a value when something was released.
	C         <-chan struct{}
	close     func()
	forOthers *stdatomic.Bool
	blind     *stdatomic.Bool
}

// ForOthers reports whether the watch told of something the waiters
// behind its waiter were not told of, since it was last asked: a waiting
// start just ahead that died (its queue lock let go in place), or, for
// the head of the line (the only waiter that watches owners/), a run's
// locks let go in place. Its waiter is then the one to ring who may go.
func (w *ReleaseWatch) ForOthers() bool {
	return w != nil && w.forOthers != nil && w.forOthers.Swap(false)
}

// Blind reports whether the watch can no longer tell of releases (its
// waiter, now the head of the line, could not watch owners/): its waiter
// must poll.
func (w *ReleaseWatch) Blind() bool {
	return w == nil || w.blind != nil && w.blind.Load()
}

// Close stops the watch.
func (w *ReleaseWatch) Close() {
	if w != nil && w.close != nil {
		w.close()
	}
}

// WatchReleases watches the state root for releases (ReleaseWatch), and,
// for waiter id (none: ""), the lock of the waiting start just ahead of
// it; an error where the system cannot watch (no inotify, or its limits
// reached).
func (s *Store) WatchReleases(id record.RunID) (*ReleaseWatch, error) { return s.watchReleases(id) }
