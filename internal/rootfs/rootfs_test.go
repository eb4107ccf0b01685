package rootfs

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// blockLimit is how long a call may take before the test decides it is
// blocked (on a FIFO's open, typically). Nothing here should take more
// than microseconds; the bound is generous for loaded CI machines and is
// not a performance assertion.
const blockLimit = 5 * time.Second

type fixture struct {
	dir     string // the root's path
	outside string // a directory outside the root
	root    *os.Root
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	base := t.TempDir()
	f := fixture{dir: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{f.dir, f.outside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	r, err := os.OpenRoot(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	f.root = r
	return f
}

func (f fixture) write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// mkfifo makes a FIFO nobody writes to. Should a call under test block on
// it anyway, the cleanup opens it for reading and writing, which releases
// any open blocked on it, so a failing test never leaves a goroutine stuck
// in the kernel.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK, 0); err == nil {
			_, _ = f.Write([]byte{0})
			f.Close()
		}
	})
}

// returnsAtOnce runs fn on another goroutine and fails the test if it has
// not returned within blockLimit. The assertion stays on the test
// goroutine.
func returnsAtOnce[T any](t *testing.T, what string, fn func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(blockLimit):
		t.Fatalf("%s blocked (no return within %s)", what, blockLimit)
	}
	var zero T
	return zero
}

type openResult struct {
	f   *os.File
	err error
}

func openAtOnce(t *testing.T, dir *os.Root, name string, flag int, perm os.FileMode) (*os.File, error) {
	t.Helper()
	r := returnsAtOnce(t, "Open("+name+")", func() openResult {
		f, err := Open(dir, name, flag, perm)
		return openResult{f, err}
	})
	if r.f != nil {
		t.Cleanup(func() { r.f.Close() })
	}
	return r.f, r.err
}

type readResult struct {
	data []byte
	err  error
}

func readAtOnce(t *testing.T, dir *os.Root, name string, limit int64) ([]byte, error) {
	t.Helper()
	r := returnsAtOnce(t, "ReadFile("+name+")", func() readResult {
		data, err := ReadFile(dir, name, limit)
		return readResult{data, err}
	})
	return r.data, r.err
}

// The flags state-root code opens files with: reading, creating a lock
// file or log, appending a refusal.
var openFlags = map[string]int{
	"O_RDONLY":                   os.O_RDONLY,
	"O_RDWR|O_CREATE":            os.O_RDWR | os.O_CREATE,
	"O_WRONLY|O_CREATE|O_APPEND": os.O_WRONLY | os.O_CREATE | os.O_APPEND,
}

func TestOpenAndReadFileRefuseWhatIsNotARegularFile(t *testing.T) {
	f := newFixture(t)
	f.write(t, "target", "secret inside the root")
	if err := os.WriteFile(filepath.Join(f.outside, "target"), []byte("secret outside the root"), 0o600); err != nil {
		t.Fatal(err)
	}
	mkfifo(t, filepath.Join(f.dir, "fifo"))
	links := map[string]string{
		"link-inside":   "target",                                  // to a regular file in the root
		"link-outside":  filepath.Join(f.outside, "target"),        // out of the root, absolute
		"link-relative": "../outside/target",                       // out of the root, relative
		"link-dangling": filepath.Join(f.outside, "would-be-made"), // O_CREATE must not create it
		"link-fifo":     "fifo",                                    // to the FIFO
		"link-dir":      ".",                                       // to a directory
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(f.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(f.dir, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A unix socket: short path, since sun_path is limited.
	sockDir, err := os.MkdirTemp("", "rootfs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	ln, err := net.Listen("unix", filepath.Join(sockDir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Rename(filepath.Join(sockDir, "s"), filepath.Join(f.dir, "socket")); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		kind fs.FileMode // the Mode type the error must report
		says string      // what the message must call it
	}{
		{"fifo", fs.ModeNamedPipe, "a FIFO"},
		{"link-inside", fs.ModeSymlink, "a symbolic link"},
		{"link-outside", fs.ModeSymlink, "a symbolic link"},
		{"link-relative", fs.ModeSymlink, "a symbolic link"},
		{"link-dangling", fs.ModeSymlink, "a symbolic link"},
		{"link-fifo", fs.ModeSymlink, "a symbolic link"},
		{"link-dir", fs.ModeSymlink, "a symbolic link"},
		{"dir", fs.ModeDir, "a directory"},
		{"socket", fs.ModeSocket, "a socket"},
	}
	check := func(t *testing.T, what string, err error, kind fs.FileMode, says, name string) {
		t.Helper()
		var nr *NotRegularError
		if !errors.As(err, &nr) {
			t.Fatalf("%s = %v (%T), want *NotRegularError", what, err, err)
		}
		if nr.Name != name || nr.Mode.Type() != kind {
			t.Errorf("%s: NotRegularError{Name %q, Mode %v}, want name %q and type %v", what, nr.Name, nr.Mode, name, kind)
		}
		if msg := err.Error(); !strings.Contains(msg, name) || !strings.Contains(msg, says) {
			t.Errorf("%s: message %q does not name %q and say %q", what, msg, name, says)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for flagName, flag := range openFlags {
				file, err := openAtOnce(t, f.root, tc.name, flag, 0o600)
				if file != nil {
					t.Errorf("Open(%s, %s) opened %s", tc.name, flagName, file.Name())
				}
				check(t, "Open("+tc.name+", "+flagName+")", err, tc.kind, tc.says, tc.name)
			}
			data, err := readAtOnce(t, f.root, tc.name, 1<<20)
			if data != nil {
				t.Errorf("ReadFile(%s) returned %q", tc.name, data)
			}
			check(t, "ReadFile("+tc.name+")", err, tc.kind, tc.says, tc.name)
		})
	}

	// Nothing was created, written or truncated through a refused name.
	if _, err := os.Lstat(filepath.Join(f.outside, "would-be-made")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("opening a dangling link with O_CREATE created its target outside the root (lstat: %v)", err)
	}
	for path, want := range map[string]string{
		filepath.Join(f.dir, "target"):     "secret inside the root",
		filepath.Join(f.outside, "target"): "secret outside the root",
	} {
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v after refused opens; want it untouched", path, b, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(f.dir, "fifo")); err != nil || fi.Mode().Type() != fs.ModeNamedPipe {
		t.Errorf("the FIFO changed: %v, %v", fi, err)
	}
}

// O_CREATE|O_EXCL never follows a link either: a planted link at a
// temporary file's name is an error, not a way out of the root.
func TestOpenExclusiveCreateRefusesExistingNames(t *testing.T) {
	f := newFixture(t)
	f.write(t, "file", "x")
	if err := os.Symlink(filepath.Join(f.outside, "made"), filepath.Join(f.dir, "link")); err != nil {
		t.Fatal(err)
	}
	mkfifo(t, filepath.Join(f.dir, "fifo"))
	for _, name := range []string{"file", "link", "fifo"} {
		file, err := openAtOnce(t, f.root, name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if file != nil || !errors.Is(err, fs.ErrExist) {
			t.Errorf("Open(%s, O_CREATE|O_EXCL) = %v, %v; want ErrExist", name, file, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(f.outside, "made")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an exclusive create through a link made a file outside the root (lstat: %v)", err)
	}
	// A fresh name is created, regular, with the mode asked for.
	file, err := openAtOnce(t, f.root, "fresh", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := file.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640&^umask() {
		t.Errorf("created file: %v, %v; want a regular file of mode %v", fi.Mode(), err, 0o640&^umask())
	}
}

func umask() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
}

func TestOpenRegularFiles(t *testing.T) {
	f := newFixture(t)
	f.write(t, "file", "hello")

	file, err := openAtOnce(t, f.root, "file", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	if n, _ := file.Read(b); string(b[:n]) != "hello" {
		t.Errorf("read %q, want hello", b[:n])
	}
	// The descriptor is usable as an ordinary blocking file: O_NONBLOCK
	// means nothing to a regular file.
	if fl, err := unix.FcntlInt(file.Fd(), unix.F_GETFL, 0); err != nil {
		t.Fatal(err)
	} else if fl&unix.O_ACCMODE != unix.O_RDONLY {
		t.Errorf("access mode %#x, want O_RDONLY", fl&unix.O_ACCMODE)
	}

	// Appending to an existing file, and creating a missing one.
	for _, name := range []string{"file", "new"} {
		file, err := openAtOnce(t, f.root, name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatalf("Open(%s, append) = %v", name, err)
		}
		if _, err := file.Write([]byte("+")); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"file": "hello+", "new": "+"} {
		if b, err := os.ReadFile(filepath.Join(f.dir, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}

	// A missing name without O_CREATE is fs.ErrNotExist, and creates nothing.
	for _, flag := range []int{os.O_RDONLY, os.O_RDWR} {
		if _, err := openAtOnce(t, f.root, "missing", flag, 0); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Open(missing, %#x) = %v, want ErrNotExist", flag, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(f.dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("Open without O_CREATE created the file")
	}
	// Names that leave the root are refused by os.Root itself.
	if _, err := openAtOnce(t, f.root, "../outside/x", os.O_RDWR|os.O_CREATE, 0o600); err == nil {
		t.Error("Open(../outside/x) succeeded")
	}
	if _, err := os.Lstat(filepath.Join(f.outside, "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("Open(../outside/x) created a file outside the root")
	}
}

func TestReadFileBounds(t *testing.T) {
	f := newFixture(t)
	f.write(t, "empty", "")
	f.write(t, "at-limit", strings.Repeat("a", 16))
	f.write(t, "over-limit", strings.Repeat("a", 17))
	f.write(t, "huge", strings.Repeat("a", 1<<20))

	data, err := readAtOnce(t, f.root, "empty", 16)
	if err != nil || data == nil || len(data) != 0 {
		t.Errorf("ReadFile(empty) = %q (nil: %v), %v; want an empty, non-nil slice", data, data == nil, err)
	}
	data, err = readAtOnce(t, f.root, "at-limit", 16)
	if err != nil || len(data) != 16 {
		t.Errorf("ReadFile(at limit) = %d bytes, %v; want all 16", len(data), err)
	}
	for name, size := range map[string]int64{"over-limit": 17, "huge": 1 << 20} {
		data, err := readAtOnce(t, f.root, name, 16)
		var tl *TooLargeError
		if !errors.As(err, &tl) {
			t.Errorf("ReadFile(%s, 16) = %d bytes, %v; want *TooLargeError", name, len(data), err)
			continue
		}
		if data != nil {
			t.Errorf("ReadFile(%s) returned data with the error", name)
		}
		if tl.Name != name || tl.Size != size || tl.Limit != 16 {
			t.Errorf("TooLargeError = %+v, want name %s size %d limit 16", tl, name, size)
		}
		if msg := err.Error(); !strings.Contains(msg, name) || !strings.Contains(msg, "16") {
			t.Errorf("message %q does not name the file and the limit", msg)
		}
	}
	if _, err := readAtOnce(t, f.root, "missing", 16); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile(missing) = %v, want ErrNotExist", err)
	}
	// A zero limit still reads an empty file.
	if data, err := readAtOnce(t, f.root, "empty", 0); err != nil || len(data) != 0 {
		t.Errorf("ReadFile(empty, 0) = %q, %v", data, err)
	}
}

// The size fstat reports is not a bound: a file can grow while it is read,
// and some report no size at all. ReadFile never reads past its limit
// whatever the size said. A procfs file (size 0, content longer than the
// limit) stands for a file that grows between the fstat and the read.
func TestReadFileBoundsWhatTheSizeDidNotSay(t *testing.T) {
	proc, err := os.OpenRoot("/proc/self")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	defer proc.Close()
	fi, err := proc.Lstat("status")
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Skipf("/proc/self/status is not a zero-sized regular file here: %v, %v", fi, err)
	}
	data, err := readAtOnce(t, proc, "status", 16)
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("ReadFile(/proc/self/status, 16) = %d bytes, %v; want *TooLargeError", len(data), err)
	}
	if tl.Limit != 16 || tl.Size != 17 {
		t.Errorf("TooLargeError = %+v; want limit 16, and size 17 (it stopped one byte past the limit)", tl)
	}
	if data, err := readAtOnce(t, proc, "status", 1<<20); err != nil || len(data) <= 16 {
		t.Errorf("ReadFile(/proc/self/status, 1 MiB) = %d bytes, %v", len(data), err)
	}
}

// check is the second line of defence: whatever the Lstat before the open
// saw, the descriptor actually opened must be a regular file and the one
// at the name. These cases stand for a swap between the Lstat and the open.
func TestCheckRefusesASwappedFile(t *testing.T) {
	f := newFixture(t)
	f.write(t, "a", "a")
	f.write(t, "b", "b")
	mkfifo(t, filepath.Join(f.dir, "fifo"))
	before, err := f.root.Lstat("a")
	if err != nil {
		t.Fatal(err)
	}

	// A FIFO was opened (non-blocking) where a regular file was seen.
	fifo, err := os.OpenFile(filepath.Join(f.dir, "fifo"), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fifo.Close()
	var nr *NotRegularError
	if err := check(f.root, "a", fifo, before); !errors.As(err, &nr) || nr.Mode.Type() != fs.ModeNamedPipe {
		t.Errorf("check(FIFO descriptor) = %v, want *NotRegularError for a FIFO", err)
	}

	// Another regular file than the one the Lstat saw.
	bf, err := os.Open(filepath.Join(f.dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	if err := check(f.root, "a", bf, before); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("check(other file) = %v, want a 'replaced' error", err)
	}

	// A file created just now (no Lstat before): what is at the name must
	// be it. Here the name holds a different file.
	if err := check(f.root, "a", bf, nil); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("check(created, name now another file) = %v, want a 'replaced' error", err)
	}
	// ... or a link.
	if err := os.Symlink("b", filepath.Join(f.dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := check(f.root, "link", bf, nil); !errors.As(err, &nr) || nr.Mode.Type() != fs.ModeSymlink {
		t.Errorf("check(created, name now a link) = %v, want *NotRegularError for a link", err)
	}
	// The right file passes.
	af, err := os.Open(filepath.Join(f.dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer af.Close()
	if err := check(f.root, "a", af, before); err != nil {
		t.Errorf("check(the file itself) = %v", err)
	}
	if err := check(f.root, "a", af, nil); err != nil {
		t.Errorf("check(the file itself, no Lstat) = %v", err)
	}
}

func TestOpenFIFO(t *testing.T) {
	f := newFixture(t)
	if err := Mkfifo(f.root, "bell", 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(f.dir, "bell"))
	if err != nil || fi.Mode().Type() != fs.ModeNamedPipe || fi.Mode().Perm() != 0o600&^umask() {
		t.Fatalf("Mkfifo made %v, %v; want a FIFO of mode 0600", fi.Mode(), err)
	}
	if err := Mkfifo(f.root, "bell", 0o600); !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "bell") {
		t.Errorf("Mkfifo over an existing name = %v, want ErrExist naming it", err)
	}

	// The write end with no reader fails at once (ENXIO) instead of
	// waiting for one: ringing a dead waiter's bell never blocks.
	w := returnsAtOnce(t, "OpenFIFO(O_WRONLY, no reader)", func() openResult {
		f, err := OpenFIFO(f.root, "bell", os.O_WRONLY)
		return openResult{f, err}
	})
	if w.f != nil {
		w.f.Close()
		t.Fatal("OpenFIFO(O_WRONLY) with no reader opened the FIFO")
	}
	if !errors.Is(w.err, syscall.ENXIO) {
		t.Errorf("OpenFIFO(O_WRONLY, no reader) = %v, want ENXIO", w.err)
	}

	// The read end (as a waiter opens it: O_RDWR) opens at once, and a
	// writer then reaches it.
	r := returnsAtOnce(t, "OpenFIFO(O_RDWR)", func() openResult {
		f, err := OpenFIFO(f.root, "bell", os.O_RDWR)
		return openResult{f, err}
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.f.Close()
	w = returnsAtOnce(t, "OpenFIFO(O_WRONLY, with a reader)", func() openResult {
		f, err := OpenFIFO(f.root, "bell", os.O_WRONLY)
		return openResult{f, err}
	})
	if w.err != nil {
		t.Fatal(w.err)
	}
	if _, err := w.f.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	w.f.Close()
	b := make([]byte, 4)
	if n, err := r.f.Read(b); err != nil || n != 1 {
		t.Errorf("read from the bell = %d, %v; want the one byte rung", n, err)
	}

	// Anything but a FIFO is refused, a link to a FIFO included.
	f.write(t, "file", "x")
	if err := os.Symlink("bell", filepath.Join(f.dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.dir, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"file", "link", "dir"} {
		for _, flag := range []int{os.O_WRONLY, os.O_RDWR} {
			r := returnsAtOnce(t, "OpenFIFO("+name+")", func() openResult {
				f, err := OpenFIFO(f.root, name, flag)
				return openResult{f, err}
			})
			var nr *NotRegularError
			if r.f != nil {
				r.f.Close()
				t.Errorf("OpenFIFO(%s, %#x) opened it", name, flag)
			} else if !errors.As(r.err, &nr) {
				t.Errorf("OpenFIFO(%s, %#x) = %v, want *NotRegularError", name, flag, r.err)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(f.dir, "file")); err != nil || string(b) != "x" {
		t.Errorf("file after a refused OpenFIFO = %q, %v", b, err)
	}
	if _, err := OpenFIFO(f.root, "missing", os.O_WRONLY); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenFIFO(missing) = %v, want ErrNotExist", err)
	}
}

// A planted hard link is the file it names, wherever that lives (a link
// to /etc/shadow in the state root would be read, or appended to by a
// root crew). Every open of an existing file refuses a second link,
// before reading or writing a byte.
func TestOpenRefusesHardLinks(t *testing.T) {
	f := newFixture(t)
	outside := filepath.Join(f.outside, "secret")
	if err := os.WriteFile(outside, []byte("secret outside the root"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(f.dir, "linked")); err != nil {
		t.Fatal(err)
	}
	for flagName, flag := range openFlags {
		_, err := openAtOnce(t, f.root, "linked", flag, 0o600)
		var le *LinkedError
		if !errors.As(err, &le) || le.Links != 2 || le.Name != "linked" {
			t.Errorf("Open(linked, %s) = %v, want a LinkedError with 2 links", flagName, err)
		} else if !strings.Contains(err.Error(), "linked has 2 hard links") {
			t.Errorf("message %q does not name the file and its links", err)
		}
	}
	if data, err := readAtOnce(t, f.root, "linked", 1<<20); err == nil || len(data) > 0 {
		t.Errorf("ReadFile(linked) = %q, %v; want a refusal and no data", data, err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret outside the root" {
		t.Errorf("the outside file changed: %q", b)
	}

	// A FIFO with a second name (a daemon's control FIFO) is never rung.
	fifo := filepath.Join(f.outside, "control")
	mkfifo(t, fifo)
	if err := os.Link(fifo, filepath.Join(f.dir, "bell")); err != nil {
		t.Fatal(err)
	}
	r := returnsAtOnce(t, "OpenFIFO(bell)", func() openResult {
		g, err := OpenFIFO(f.root, "bell", os.O_RDWR)
		return openResult{g, err}
	})
	var le *LinkedError
	if !errors.As(r.err, &le) {
		if r.f != nil {
			r.f.Close()
		}
		t.Errorf("OpenFIFO of a FIFO with two links = %v, want a LinkedError", r.err)
	}
}

// Files and FIFOs crew creates get exactly the mode asked for, whatever
// the umask: a state root shared with a group needs 0660.
func TestCreatedFilesGetTheirModeDespiteTheUmask(t *testing.T) {
	f := newFixture(t)
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	for _, flag := range []int{os.O_RDWR | os.O_CREATE | os.O_EXCL, os.O_WRONLY | os.O_CREATE | os.O_APPEND} {
		name := "created" + string(rune('a'+flag%7))
		g, err := Open(f.root, name, flag, 0o660)
		if err != nil {
			t.Fatal(err)
		}
		g.Close()
		if fi, err := os.Stat(filepath.Join(f.dir, name)); err != nil || fi.Mode().Perm() != 0o660 {
			t.Errorf("created %s with flags %#x: mode %v, %v; want 0660", name, flag, fi.Mode().Perm(), err)
		}
	}
	// An existing file keeps its mode: only what Open created is changed.
	f.write(t, "existing", "x")
	g, err := Open(f.root, "existing", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if fi, _ := os.Stat(filepath.Join(f.dir, "existing")); fi.Mode().Perm() != 0o600 {
		t.Errorf("an existing file's mode changed to %v", fi.Mode().Perm())
	}
	if err := Mkfifo(f.root, "bell", 0o660); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(f.dir, "bell")); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("Mkfifo: mode %v, %v; want 0660", fi.Mode().Perm(), err)
	}
}

// A writer's atomic rename (what crew does to every record) that lands
// between a reader's open and its check leaves the reader holding a file
// with no name (0 links): Open looks again and returns the new file, and
// never calls it a planted hard link. One that keeps landing ends in a
// *ReplacedError.
func TestOpenLooksAgainWhenARenameWinsTheRace(t *testing.T) {
	f := newFixture(t)
	f.write(t, "rec", "old")
	replace := func(content string) {
		tmp := filepath.Join(f.dir, "tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(f.dir, "rec")); err != nil {
			t.Fatal(err)
		}
	}
	hooked := 0
	testHookOpened = func(string) {
		if hooked++; hooked == 1 {
			replace("new")
		}
	}
	t.Cleanup(func() { testHookOpened = nil })
	data, err := ReadFile(f.root, "rec", 1<<10)
	if err != nil || string(data) != "new" || hooked != 2 {
		t.Errorf("ReadFile across a rename = %q, %v after %d opens; want \"new\" after 2", data, err, hooked)
	}

	// Replaced at every look: a ReplacedError after openTries opens.
	hooked = 0
	testHookOpened = func(string) { hooked++; replace("again") }
	_, err = ReadFile(f.root, "rec", 1<<10)
	var replaced *ReplacedError
	var linked *LinkedError
	if !errors.As(err, &replaced) || errors.As(err, &linked) || hooked != openTries {
		t.Errorf("ReadFile, always replaced = %v after %d opens; want *ReplacedError after %d", err, hooked, openTries)
	}
	if err != nil && err.Error() != "rec was replaced while being opened" {
		t.Errorf("message %q", err)
	}

	// Removed after the open (a run's record leaving the active set): no
	// link error either, and the next look finds nothing.
	hooked = 0
	testHookOpened = func(string) {
		if hooked++; hooked == 1 {
			_ = os.Remove(filepath.Join(f.dir, "rec"))
		}
	}
	if _, err := ReadFile(f.root, "rec", 1<<10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a file removed after the open = %v; want not-exist", err)
	}
}
