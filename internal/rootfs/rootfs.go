// Package rootfs opens files inside an *os.Root the way every state-root
// file must be opened: only regular files, never through a symbolic link,
// never a file with a second hard link (which could be a file outside the
// root), never blocking on a FIFO or device, and read with a bound.
// os.Root keeps every access inside the root; this package adds what
// os.Root does not promise (it follows symbolic links that stay inside the
// root, and a hard link is the file it names, wherever that lives).
package rootfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// NotRegularError is a name that exists but is not a regular file (a
// symbolic link, FIFO, device, socket or directory). Nothing was opened.
type NotRegularError struct {
	Name string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file", e.Name, Kind(e.Mode))
}

// LinkedError is a file with more than one hard link: the same file is
// reachable under another name, possibly outside the root (a planted link
// to /etc/shadow), so it is neither read nor written. crew never makes a
// second link to any file it owns. Nothing was kept open.
type LinkedError struct {
	Name  string
	Links uint64
}

func (e *LinkedError) Error() string {
	return fmt.Sprintf("%s has %d hard links (the same file has another name, possibly outside the state root); crew opens only files with one", e.Name, e.Links)
}

// ReplacedError is a file that another name's rename replaced, or an
// unlink removed, between the look at its name and the open: what was
// opened is no longer the file at the name. crew replaces its records by
// rename, so a reader meets this in a race it lost, not in an attack;
// Open looks again a few times before it gives up with this.
type ReplacedError struct {
	Name string
}

func (e *ReplacedError) Error() string {
	return fmt.Sprintf("%s was replaced while being opened", e.Name)
}

// TooLargeError is a file larger than its reader's limit; it was not read.
type TooLargeError struct {
	Name  string
	Size  int64
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is %d bytes, over the limit of %d for this kind of file", e.Name, e.Size, e.Limit)
}

// Kind names what a file of mode m is, for messages: "a symbolic link",
// "a FIFO", "a directory", "a file", ...
func Kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a file"
	}
	return fmt.Sprintf("a file of mode %v", m)
}

// Open opens name in dir for flag, refusing anything but a regular file
// with one link, reached without a symbolic link. The open itself never
// blocks: a FIFO swapped in between the check and the open is opened
// non-blocking and then refused. O_CREATE|O_EXCL creates a fresh file
// (os.Root never follows a link for that); other flags need the file to be,
// or become, regular. A file this call creates gets exactly perm, whatever
// the umask (a state root shared with a group needs 0660).
func Open(dir *os.Root, name string, flag int, perm os.FileMode) (*os.File, error) {
	for tries := 1; ; tries++ {
		f, err := open(dir, name, flag, perm)
		var replaced *ReplacedError
		if errors.As(err, &replaced) && !exclusive(flag) && tries < openTries {
			continue // a writer's rename won the race: the name holds a newer file
		}
		return f, err
	}
}

// openTries bounds Open's looks at a name whose file keeps being replaced.
const openTries = 3

// testHookOpened, when set (by tests), runs between open's open and its
// check of what it opened: where a concurrent rename or unlink lands.
var testHookOpened func(name string)

// exclusive reports whether flag creates a fresh file (O_CREATE|O_EXCL).
func exclusive(flag int) bool { return flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL }

func open(dir *os.Root, name string, flag int, perm os.FileMode) (*os.File, error) {
	excl := exclusive(flag)
	var before os.FileInfo
	if !excl {
		fi, err := dir.Lstat(name)
		switch {
		case err == nil && !fi.Mode().IsRegular():
			return nil, &NotRegularError{Name: name, Mode: fi.Mode()}
		case err == nil:
			before = fi
		case !errors.Is(err, fs.ErrNotExist) || flag&os.O_CREATE == 0:
			return nil, err
		}
	}
	f, err := dir.OpenFile(name, flag|syscall.O_NONBLOCK, perm)
	if err != nil {
		return nil, err
	}
	if testHookOpened != nil {
		testHookOpened(name)
	}
	if err := check(dir, name, f, before); err != nil {
		_ = f.Close()
		return nil, err
	}
	if flag&os.O_CREATE != 0 && (excl || before == nil) {
		if err := setPerm(f, perm); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	return f, nil
}

// setPerm gives a file this process just created exactly perm: creation
// modes pass through the umask. A file someone else created in the same
// instant (it is not ours) is left as it is.
func setPerm(f *os.File, perm os.FileMode) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Mode().Perm() == perm.Perm() {
		return nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil
	}
	if err := f.Chmod(perm.Perm()); err != nil {
		return fmt.Errorf("set the mode of %s: %w", fi.Name(), err)
	}
	return nil
}

// Links is a file's hard link count (1 where the system does not say).
func Links(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// check confirms that f is a regular file and the one now at name (not a
// file some link pointed to, nor one swapped in after the Lstat).
func check(dir *os.Root, name string, f *os.File, before os.FileInfo) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return &NotRegularError{Name: name, Mode: fi.Mode()}
	}
	switch n := Links(fi); {
	case n == 0:
		// Renamed over, or removed, since the open: not a planted link.
		return &ReplacedError{Name: name}
	case n != 1:
		return &LinkedError{Name: name, Links: n}
	}
	if before == nil {
		// Created just now (or raced into existence): what is at the name
		// must be what we opened.
		if before, err = dir.Lstat(name); err != nil {
			return err
		}
		if !before.Mode().IsRegular() {
			return &NotRegularError{Name: name, Mode: before.Mode()}
		}
	}
	if !os.SameFile(fi, before) {
		return &ReplacedError{Name: name}
	}
	return nil
}

// ReadFile reads a regular file of at most limit bytes.
func ReadFile(dir *os.Root, name string, limit int64) ([]byte, error) {
	data, _, err := ReadFileStat(dir, name, limit)
	return data, err
}

// ReadFileStat is ReadFile that also returns the file's status as fstat
// reported it on the very descriptor the data was read through: who owns
// what was read, not whatever the name holds a moment later.
func ReadFileStat(dir *os.Root, name string, limit int64) ([]byte, os.FileInfo, error) {
	f, err := Open(dir, name, os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() > limit {
		return nil, nil, &TooLargeError{Name: name, Size: fi.Size(), Limit: limit}
	}
	// The size may grow while we read; never read past the limit.
	data, err := readAll(io.LimitReader(f, limit+1), fi.Size())
	if err != nil {
		return nil, nil, err
	}
	if int64(len(data)) > limit {
		return nil, nil, &TooLargeError{Name: name, Size: int64(len(data)), Limit: limit}
	}
	return data, fi, nil
}

// readAll is io.ReadAll with room from the start for size bytes and one
// more, so that a file that does not grow is read in two reads (the data,
// then the end), as os.ReadFile reads it. io.ReadAll starts at 512 bytes
// and grows as it goes: a read and a copy for every step, about ten for
// the active index of 200 runs, which admission reads on every pass.
func readAll(r io.Reader, size int64) ([]byte, error) {
	data := make([]byte, 0, max(size+1, 512))
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := r.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return data, err
		}
	}
}

// OpenFIFO opens the FIFO name in dir, refusing anything else, without
// ever blocking (O_NONBLOCK: a write end with no reader fails with ENXIO
// instead of waiting).
func OpenFIFO(dir *os.Root, name string, flag int) (*os.File, error) {
	before, err := dir.Lstat(name)
	if err != nil {
		return nil, err
	}
	if before.Mode().Type() != fs.ModeNamedPipe {
		return nil, &NotRegularError{Name: name, Mode: before.Mode()}
	}
	f, err := dir.OpenFile(name, flag|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode().Type() != fs.ModeNamedPipe || !os.SameFile(fi, before) || Links(fi) == 0 {
		_ = f.Close()
		return nil, &ReplacedError{Name: name} // or removed: its waiter left
	}
	if n := Links(fi); n != 1 {
		// A FIFO linked from elsewhere (a system daemon's control FIFO):
		// ringing it would write into someone else's channel.
		_ = f.Close()
		return nil, &LinkedError{Name: name, Links: n}
	}
	return f, nil
}

// fifoPerm gives the FIFO just made exactly perm (mkfifo's mode passes
// through the umask), through a descriptor of the FIFO itself.
func fifoPerm(dir *os.Root, name string, perm os.FileMode) error {
	f, err := OpenFIFO(dir, name, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	return setPerm(f, perm)
}
