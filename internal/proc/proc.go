// Package proc answers "which processes belong to a run" from what the
// kernel says, never from a pid written in a file: a process belongs to a
// run while it holds the run's owner lock, an exclusive flock on a file
// crew created. On Linux the holders are found through /proc (each
// descriptor of each process is compared, by device and inode, with the
// lock file, and /proc/<pid>/fdinfo must show that very descriptor holding
// the flock), pinned with a pidfd, and signalled through it. A process group
// is signalled only right after one of its members was shown, through its
// pidfd, to hold the lock and to be in that group.
//
// Where the kernel offers no such proof (macOS: no /proc, no pidfd) every
// function that would prove or signal returns ErrUnsupported, and crew
// refuses to act rather than guess.
package proc

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// ErrUnsupported: this system lacks the facility that proves which process
// holds a file (/proc and pidfds).
var ErrUnsupported = fmt.Errorf("%s has no /proc and no pidfds, so crew cannot prove which processes hold a run's lock", runtime.GOOS)

// ErrGone: the process exited (or no longer holds the lock) since it was
// seen.
var ErrGone = errors.New("process is gone or no longer holds the lock")

// FileID names a file the way the kernel does: device and inode.
type FileID struct {
	Dev uint64
	Ino uint64
}

// IDOf is the identity of an open file.
func IDOf(f *os.File) (FileID, error) {
	fi, err := f.Stat()
	if err != nil {
		return FileID{}, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileID{}, fmt.Errorf("stat %s: no device and inode on %s", f.Name(), runtime.GOOS)
	}
	return FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, nil //nolint:unconvert // int32 on darwin
}

// Holder is a process seen holding an exclusive flock on one of the files
// asked about, through a descriptor of its own.
type Holder struct {
	PID  int
	File FileID
	// PGID, Start (clock ticks after boot) and State are from
	// /proc/<pid>/stat, read right after the descriptor was seen.
	PGID  int
	Start uint64
	State byte
}

// Scan is what one pass over the process table found.
type Scan struct {
	Holders []Holder
	// Unreadable counts processes whose descriptors could not be read
	// (another user's, without privilege): they may hold the lock, but
	// nothing can be proven about them, so nothing is done to them.
	Unreadable int
}

// Of returns the holders of file f.
func (s Scan) Of(f FileID) []Holder {
	var out []Holder
	for _, h := range s.Holders {
		if h.File == f {
			out = append(out, h)
		}
	}
	return out
}
