//go:build linux

package runstore

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	stdatomic "sync/atomic"
	"time"
	"unsafe"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/record"
	"golang.org/x/sys/unix"
)

// watchReleases is an inotify instance on the root (crew.json renamed
// into place, or written in place) and on owners/ (last writers closing a
// lock file), and, for waiter id, on the queue lock of the waiter just
// ahead. A waiter watches owners/ only while it is the head of the line
// (nobody's queue lock is held ahead of it), and tells the others of what
// it hears there (ForOthers): every finishing run lets go of its owner
// lock in place once (RunLocks.OthersHold), and when every waiter watched
// owners/, each finish woke the whole line (issue 25: 45-90 µs of CPU per
// waiter per handoff, a 32-waiter line's handoff 3-4 ms slower than a
// short line's).
func (s *Store) watchReleases(id record.RunID) (*ReleaseWatch, error) {
	r, err := s.newReleases(id)
	if err != nil {
		return nil, err
	}
	return &ReleaseWatch{C: r.c, close: r.close, forOthers: &r.forOthers, blind: &r.blind}, nil
}

// newReleases makes and starts the watch of watchReleases.
func (s *Store) newReleases(id record.RunID) (*releases, error) {
	owners, err := s.dir(ownersDir)
	if err != nil {
		return nil, err
	}
	root, err := s.dir(".")
	if err != nil {
		owners.Close()
		return nil, err
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		owners.Close()
		root.Close()
		return nil, fmt.Errorf("watch the state root: %w", err)
	}
	r := &releases{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, owners: owners, id: id, c: make(chan struct{}, 1)}
	_, err = addWatch(fd, root, unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE)
	root.Close()
	if err == nil && id != "" {
		r.queue, err = s.dir(queueDir)
	}
	if err != nil {
		r.closeNow()
		return nil, fmt.Errorf("watch the state root: %w", err)
	}
	died := r.watchAhead("")
	if r.aheadWD == 0 {
		if err := r.watchOwners(); err != nil {
			r.closeNow()
			return nil, fmt.Errorf("watch the state root: %w", err)
		}
	}
	if died {
		r.forOthers.Store(true)
		r.ring()
	}
	go r.listen()
	return r, nil
}

// watchOwners starts watching owners/, once: for a watch that is no
// waiter's, or for the head of the line.
func (r *releases) watchOwners() error {
	if r.ownersWD.Load() != 0 {
		return nil
	}
	wd, err := addWatch(r.fd, r.owners, unix.IN_CLOSE_WRITE)
	if err != nil {
		return err
	}
	r.ownersWD.Store(wd)
	return nil
}

// closeNow closes a watch that was never handed out.
func (r *releases) closeNow() {
	r.f.Close()
	r.owners.Close()
	if r.queue != nil {
		r.queue.Close()
	}
}

// addWatch watches the directory open as dir, through its descriptor:
// nothing is looked up again by path.
func addWatch(fd int, dir *os.Root, mask uint32) (int32, error) {
	d, err := dir.Open(".")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	wd, err := unix.InotifyAddWatch(fd, fmt.Sprintf("/proc/self/fd/%d", d.Fd()), mask)
	return int32(wd), err
}

type releases struct {
	f        *os.File
	fd       int
	owners   *os.Root
	ownersWD stdatomic.Int32 // 0: owners/ not watched (a waiter behind the head)
	c        chan struct{}
	once     sync.Once

	// The waiter's place in line (none: no id): its queue/, and the queue
	// lock of the waiter just ahead that it watches (ahead, at aheadWD; 0:
	// none). Only the listen goroutine changes them, after the start.
	id      record.RunID
	queue   *os.Root
	ahead   string
	aheadWD int32
	// forOthers: told of something the waiters behind were not told of
	// (a death ahead, or as the head a release in owners/), not yet asked
	// about (ForOthers).
	forOthers stdatomic.Bool
	// blind: the head of the line could not watch owners/ (the kernel's
	// limit on watches): its waiter polls.
	blind stdatomic.Bool
}

// close gives the watch back without waiting for it: the kernel makes the
// closing of an inotify instance wait for a grace period (about 12 ms,
// docs/benchmarks.md), and an admitted waiter closes its watch inside the
// admission lock, on its way to its command.
func (r *releases) close() {
	r.once.Do(func() {
		go func() {
			_ = r.f.Close() // ends listen
			r.owners.Close()
			if r.queue != nil {
				r.queue.Close()
			}
		}()
	})
}

// lookAgainAfter are when a waiter told of a release is told again. The
// kernel tells of a close (fsnotify_close, early in __fput) before it lets
// go of the file's flocks (locks_remove_file, later in the same call): the
// waiter's look may still find the lock of a process that just died held,
// by it, and if that was the last of the run's locks to go, nothing else
// would tell of the release until the safety poll, minutes later. Three more
// rings, the last a second on, cover a machine too busy to let the dead
// finish dying. (An owner lock closed while its supervisor's lock is held
// is not a release: if the supervisor is dying too, its own lock's close
// tells.)
var lookAgainAfter = []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second}

// lookAgain rings the waiter again at each lookAgainAfter, to look for
// the others too.
func (r *releases) lookAgain() {
	for _, after := range lookAgainAfter {
		time.AfterFunc(after, func() {
			r.forOthers.Store(true)
			r.ring()
		})
	}
}

// ring tells the waiter something may have been released.
func (r *releases) ring() {
	select {
	case r.c <- struct{}{}:
	default:
	}
}

// listen turns the events that matter into wake-ups until the watch is
// closed.
func (r *releases) listen() {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := r.f.Read(buf)
		if err != nil {
			return
		}
		if r.matters(buf[:n]) {
			r.ring()
		}
	}
}

// matters reports whether a batch of events holds one a waiter must look
// at: a lock file of owners/ released without a word (released), crew.json
// replaced or written in place, or events lost (the queue overflowed).
func (r *releases) matters(buf []byte) bool {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		owners := r.ownersWD.Load()
		nameAt := off + unix.SizeofInotifyEvent
		off = nameAt + int(ev.Len)
		if off > len(buf) {
			return true // a torn batch: look rather than miss one
		}
		name := strings.TrimRight(string(buf[nameAt:off]), "\x00")
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0:
			return true
		case ev.Mask&unix.IN_IGNORED != 0:
			// A watch ended (the one-shot watch ahead, after its event).
		case r.aheadWD != 0 && ev.Wd == r.aheadWD:
			if r.aheadLeft() {
				return true
			}
		case owners != 0 && ev.Wd == owners && strings.HasSuffix(name, ".lock"):
			if r.released(name) {
				r.forOthers.Store(true) // only the head watches owners/
				r.lookAgain()
				return true
			}
		case ev.Wd != owners && name == configName:
			return true
		}
	}
	return false
}

// released reports whether the lock file name of owners/, just closed by
// the last process that had it open for writing, may have freed a slot
// that nobody will announce. A normal end removes its locks before it
// closes them, and rings the waiters its slot can serve; so a lock still
// in place was let go by processes that died. An owner lock is let go
// early also by a living supervisor, which takes it again to finish the
// run (and then rings): that is news only once the supervisor is gone too,
// and its own lock's close says when. Without this screen every waiter
// would look at the state root at every finish, a herd the size of the
// queue.
func (r *releases) released(name string) bool {
	if _, err := r.owners.Lstat(name); err != nil {
		return false // removed first: a normal end, whose finisher rings
	}
	id, _ := strings.CutSuffix(name, ".lock")
	if strings.HasSuffix(id, ".supervisor") {
		return true // its supervisor died
	}
	held, err := lockfs.Probe(r.owners, supervisorLockName(record.RunID(id)))
	return err != nil || !held
}

// The waiter just ahead. A waiting start killed just as it was rung for a
// free slot leaves that slot free, and nobody rings again: its queue lock,
// closed in place by the kernel, is the only news. Each waiter watches
// that one file of the waiter just ahead of it (a one-shot inotify watch on
// the file), so a death in line wakes one waiter, not the queue; a waiter
// that leaves normally removes its lock before it lets go, and the one
// behind it only looks for the next one ahead.

// aheadLeft takes in the close of the watched lock ahead: it finds the
// waiter now ahead, and reports whether a waiter died (its lock let go in
// place) rather than left, which it also remembers for Sentinel.
func (r *releases) aheadLeft() bool {
	gone := r.ahead
	_, err := r.queue.Lstat(gone)
	died := err == nil
	r.aheadWD, r.ahead = 0, "" // one-shot: the kernel removed the watch
	if r.watchAhead(gone) {
		died = true
	}
	// Head of the line now: a release between the last head's leaving
	// and this watch was heard by nobody, so look once, for all.
	head := r.aheadWD == 0 && r.ownersWD.Load() == 0
	if head && r.watchOwners() != nil {
		r.blind.Store(true)
	}
	if died {
		// As with owners/: the kernel tells of the close before it lets go
		// of the flock, so a look right now may still see the dead
		// waiter's place held. Tell again, as the one to ring for it.
		r.lookAgain()
	}
	if died || head {
		r.forOthers.Store(true)
	}
	return died || head
}

// watchAhead watches the queue lock of the nearest waiter ahead whose lock
// is held, but for the lock closed just now (gone: its last holder closed
// it, whatever a probe may still see); it reports whether it passed one
// let go in place on the way (a waiter that died). The watch is made
// before the probe, so a death between the two is not missed.
func (r *releases) watchAhead(gone string) (died bool) {
	if r.queue == nil {
		return false
	}
	if r.aheadWD != 0 {
		_, _ = unix.InotifyRmWatch(r.fd, uint32(r.aheadWD))
		r.aheadWD, r.ahead = 0, ""
	}
	names, err := listNames(r.queue)
	if err != nil {
		return true // cannot tell: look
	}
	var ahead []string
	for _, name := range names {
		id, ok := strings.CutSuffix(name, ".lock")
		if ok && name != gone && record.LooksLikeRunID(id) && id < string(r.id) {
			ahead = append(ahead, name)
		}
	}
	slices.Sort(ahead)
	for i := len(ahead) - 1; i >= 0; i-- {
		name := ahead[i]
		wd, err := addFileWatch(r.fd, r.queue, name, unix.IN_CLOSE_WRITE|unix.IN_ONESHOT|unix.IN_DONT_FOLLOW)
		if err != nil {
			continue // gone meanwhile
		}
		if held, err := lockfs.Probe(r.queue, name); err == nil && !held {
			_, _ = unix.InotifyRmWatch(r.fd, uint32(wd))
			if _, err := r.queue.Lstat(name); err == nil {
				died = true
			}
			continue
		}
		r.aheadWD, r.ahead = wd, name
		return died
	}
	return died
}

// addFileWatch watches the file name of the directory open as dir; with
// IN_DONT_FOLLOW a symbolic link planted there is watched, not followed.
func addFileWatch(fd int, dir *os.Root, name string, mask uint32) (int32, error) {
	d, err := dir.Open(".")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	wd, err := unix.InotifyAddWatch(fd, fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name), mask)
	return int32(wd), err
}
