package lockfs

// Cross-process test harness. flock(2) locks belong to open file
// descriptions, so the only honest way to prove what another process sees
// is to have another process: the test binary re-executes itself with
// CREW_LOCKFS_HELPER=<mode>:<path>, and TestMain runs the helper instead of
// the tests. <path> is <dir>/<name>: the helper opens <dir> as an *os.Root
// and works on <name> in it, as crew does. A helper prints "locked" (or
// another status line) on stdout once it holds what it was asked to hold,
// then obeys commands read from stdin ("release", "remove", "still") and
// exits on EOF. Every helper is SIGKILLed and reaped in t.Cleanup.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/helperproc"
	"golang.org/x/sys/unix"
)

const (
	helperEnv     = "CREW_LOCKFS_HELPER"
	helperTimeout = "CREW_LOCKFS_TIMEOUT"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHelper(spec))
	}
	os.Exit(m.Run())
}

func runHelper(spec string) int {
	mode, path, _ := strings.Cut(spec, ":")
	fail := func(err error) int {
		fmt.Printf("error: %v\n", err)
		return 1
	}
	// openDir opens the directory of path as a root, and returns the name.
	openDir := func() (*os.Root, string, error) {
		r, err := os.OpenRoot(filepath.Dir(path))
		return r, filepath.Base(path), err
	}
	switch mode {
	case "hold-create": // Create(dir, name) and hold it
		dir, name, err := openDir()
		if err != nil {
			return fail(err)
		}
		l, err := Create(dir, name)
		if err != nil {
			return fail(err)
		}
		fmt.Println("locked")
		return lockCommands(l)

	case "take": // Take(dir, name) and hold it if we got it
		dir, name, err := openDir()
		if err != nil {
			return fail(err)
		}
		l, err := Take(dir, name)
		switch {
		case errors.Is(err, ErrBusy):
			fmt.Println("busy")
			return 0
		case errors.Is(err, ErrGone):
			fmt.Println("gone")
			return 0
		case err != nil:
			return fail(err)
		}
		fmt.Println("locked")
		return lockCommands(l)

	case "hold-shared": // what Probe does, but held: LOCK_SH on a read-only fd
		f, err := os.Open(path)
		if err != nil {
			return fail(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
			return fail(err)
		}
		fmt.Println("locked")
		helperproc.WaitEOF()
		return 0

	case "hold-acquire": // Acquire(dir, name, $CREW_LOCKFS_TIMEOUT) and hold it
		timeout := 10 * time.Second
		if s := os.Getenv(helperTimeout); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				return fail(err)
			}
			timeout = d
		}
		dir, name, err := openDir()
		if err != nil {
			return fail(err)
		}
		fmt.Println("waiting")
		l, err := Acquire(context.Background(), dir, name, timeout, func() { fmt.Println("busy") })
		if errors.Is(err, ErrTimeout) {
			fmt.Println("timeout")
			return 0
		}
		if err != nil {
			return fail(err)
		}
		fmt.Println("locked")
		return lockCommands(l)

	case "probe-loop": // Probe(dir, name) in a tight loop until stdin closes
		dir, name, err := openDir()
		if err != nil {
			return fail(err)
		}
		done := make(chan struct{})
		go func() { helperproc.WaitEOF(); close(done) }()
		fmt.Println("probing")
		var n, held, errs int
		for {
			select {
			case <-done:
				fmt.Printf("probes=%d held=%d errors=%d\n", n, held, errs)
				return 0
			default:
			}
			h, err := Probe(dir, name)
			n++
			if h {
				held++
			}
			if err != nil {
				errs++
			}
		}

	case "hold-inherited": // holds fd 3 (ExtraFiles[0]) open until stdin closes
		if err := checkFD3(); err != nil {
			return fail(err)
		}
		fmt.Println("locked")
		helperproc.WaitEOF()
		return 0

	case "adopt-inherited": // Adopt(fd 3, dir, name), then obeys commands
		dir, name, err := openDir()
		if err != nil {
			return fail(err)
		}
		if err := checkFD3(); err != nil {
			return fail(err)
		}
		l, err := Adopt(os.NewFile(3, "inherited"), dir, name)
		if err != nil {
			return fail(err)
		}
		fmt.Println("locked")
		return lockCommands(l)

	case "hold-inherited-detached": // holds fd 3 until killed (at most a minute)
		if err := checkFD3(); err != nil {
			return 1
		}
		time.Sleep(time.Minute)
		return 0

	case "spawn-inheritor": // Create(dir, name), hand it to a detached grandchild
		dir, name, err := openDir()
		if err != nil {
			return fail(err)
		}
		l, err := Create(dir, name)
		if err != nil {
			return fail(err)
		}
		exe, err := os.Executable()
		if err != nil {
			return fail(err)
		}
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), helperEnv+"=hold-inherited-detached:", helperproc.GORACE())
		cmd.ExtraFiles = []*os.File{l.File()}
		if err := cmd.Start(); err != nil {
			return fail(err)
		}
		fmt.Printf("locked %d\n", cmd.Process.Pid)
		helperproc.WaitEOF()
		return 0

	case "churn-create", "churn-take":
		// Create (or take over) the lock file and remove it again, as fast
		// as possible, until stdin closes.
		dir, name, err := openDir()
		if err != nil {
			return fail(err)
		}
		done := make(chan struct{})
		go func() { helperproc.WaitEOF(); close(done) }()
		fmt.Println("churning")
		var cycles, got int
		for {
			select {
			case <-done:
				fmt.Printf("cycles=%d got=%d\n", cycles, got)
				return 0
			default:
			}
			cycles++
			var l *Lock
			if mode == "churn-create" {
				l, err = Create(dir, name)
			} else {
				l, err = Take(dir, name)
			}
			if err != nil {
				continue
			}
			got++
			if err := l.RemoveAndRelease(); err != nil {
				return fail(err)
			}
		}

	case "idle": // just stays alive until stdin closes
		fmt.Println("ready")
		helperproc.WaitEOF()
		return 0
	}
	return fail(fmt.Errorf("unknown helper mode %q", mode))
}

func lockCommands(l *Lock) int {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "release":
			if err := l.Release(); err != nil {
				fmt.Printf("error: %v\n", err)
				return 1
			}
			fmt.Println("released")
		case "remove":
			if err := l.RemoveAndRelease(); err != nil {
				fmt.Printf("error: %v\n", err)
				return 1
			}
			fmt.Println("removed")
		case "still":
			same, err := l.StillAtName()
			fmt.Printf("still %v %v\n", same, err)
		}
	}
	return 0
}

// checkFD3 verifies that the inherited descriptor is open. It deliberately
// does not wrap it in an *os.File, whose finalizer could close it.
func checkFD3() error {
	var st unix.Stat_t
	if err := unix.Fstat(3, &st); err != nil {
		return fmt.Errorf("inherited fd 3: %w", err)
	}
	return nil
}

// helper is a helper process: this test binary run again as one mode.
type helper = helperproc.Process

// startHelper starts the test binary as helper mode:arg. configure may
// adjust the command (ExtraFiles, Env) before it starts.
func startHelper(t *testing.T, mode, arg string, configure ...func(*exec.Cmd)) *helper {
	t.Helper()
	return helperproc.Start(t, []string{helperEnv + "=" + mode + ":" + arg}, configure...)
}

// killPID SIGKILLs a process that is not our child (a grandchild).
func killPID(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// lockDir is a directory for lock files, opened as the *os.Root lockfs
// works in.
type lockDir struct {
	path string
	root *os.Root
}

func newLockDir(t *testing.T) lockDir {
	t.Helper()
	path := t.TempDir()
	r, err := os.OpenRoot(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return lockDir{path: path, root: r}
}

// at is the full path of name, for helpers and for checks made without
// lockfs.
func (d lockDir) at(name string) string { return filepath.Join(d.path, name) }

const testLockName = "r-20240102T030405.000000006Z-0123456789abcdef.lock"

// mustProbe is Probe that fails the test on error.
func mustProbe(t *testing.T, d lockDir, name string) bool {
	t.Helper()
	held, err := Probe(d.root, name)
	if err != nil {
		t.Fatalf("Probe(%s): %v", name, err)
	}
	return held
}

// eventually polls cond until it holds or d passes.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
