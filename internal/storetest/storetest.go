// Package storetest holds the fixtures the tests of the state root's
// packages share (runstore and the packages that keep parts of the root:
// runlog, queue, finishindex): valid records and tickets, run ids at a
// chosen time, and the file checks a test makes as an outsider would,
// with os.* directly. It does not import runstore, so that runstore's own
// tests can use it too. Only tests import it.
package storetest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/record"
)

// ID is a valid run id, for tests that need one run.
const ID record.RunID = "r-20240102T030405.000000006Z-0123456789abcdef"

// Record is a valid record of run id in state.
func Record(id record.RunID, state record.State) *record.Run {
	created, err := id.CreatedAt()
	if err != nil {
		panic(err)
	}
	r := &record.Run{
		Version:           record.RecordVersion,
		RunID:             id,
		Task:              "nightly-backup",
		State:             state,
		Command:           []string{"make", "backup"},
		Dir:               "/srv",
		Host:              "ci-7",
		CreatedAt:         created,
		SupervisorPID:     4711,
		SlotsInUse:        1,
		MaximumInProgress: 4,
	}
	if state != record.Provisioning {
		started := created.Add(time.Second)
		r.StartedAt = &started
		r.TaskPID = 4712
		r.PGID = 4712
	}
	if !state.Active() {
		finished := created.Add(time.Minute)
		code := 0
		r.FinishedAt = &finished
		r.ExitCode = &code
		r.Reason = "exited"
	}
	return r
}

// Finished is a finished record of task, of a run created at created
// (the n-th of that instant) that finished at finished.
func Finished(created, finished time.Time, n int, task string, state record.State) *record.Run {
	rec := Record(IDAt(created, n), state)
	rec.Task = task
	rec.FinishedAt = &finished
	if state == record.Failed {
		code := 2
		rec.ExitCode = &code
	}
	return rec
}

// Ticket is a valid ticket of a start of task waiting as id.
func Ticket(id record.RunID, task string) *record.Ticket {
	created, _ := id.CreatedAt()
	return &record.Ticket{Version: record.TicketVersion, RunID: id, Task: task, Command: []string{"true"},
		Host: "ci-7", PID: os.Getpid(), CreatedAt: created}
}

// IDAt makes a deterministic run id for a creation time and a suffix.
func IDAt(tm time.Time, n int) record.RunID {
	return record.RunID(fmt.Sprintf("r-%s-%016x", tm.UTC().Format("20060102T150405.000000000Z"), n))
}

// A Store is a state root a test made: runstore's.
type Store interface {
	Ensure() error
	Close() error
}

// Ensured is s, a new store, made on disk, and closed when the test
// ends.
func Ensured[S Store](t testing.TB, s S) S {
	t.Helper()
	if err := s.Ensure(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// RootPath is where a test's state root goes: in a fresh directory, not
// made yet.
func RootPath(t testing.TB) string { return filepath.Join(t.TempDir(), "state") }

// WriteString writes a file of the state root as an outsider would.
func WriteString(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ReadString reads a file as an outsider would.
func ReadString(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// MkdirAll makes a directory and its parents.
func MkdirAll(t testing.TB, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
}

// ReleasedDir is the directory of owners/ that finished runs' lock files
// pass through on their way out (runstore's releasedDir).
const ReleasedDir = ".released"

// AssertOnlyFiles checks that dir holds exactly the named entries: in
// particular, no leftover temporary files.
func AssertOnlyFiles(t testing.TB, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		if e.IsDir() && e.Name() == ReleasedDir {
			continue // part of owners/'s layout, not a file left behind
		}
		got = append(got, e.Name())
	}
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s holds %q, want exactly %q", dir, got, want)
	}
}

// AssertMode checks a file's permission bits.
func AssertMode(t testing.TB, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s has mode %v, want %v", path, got, want)
	}
}

// AssertMissing checks that nothing is at path.
func AssertMissing(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists (lstat: %v), want it gone", path, err)
	}
}

// AssertExists checks that something is at path.
func AssertExists(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("%s: %v, want it to exist", path, err)
	}
}

// Mkfifo makes a FIFO nobody writes to. Should code under test block on it
// anyway, the cleanup opens it for reading and writing, which releases any
// open blocked on it, so a failing test leaves no goroutine stuck.
func Mkfifo(t testing.TB, path string) {
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

// BlockLimit is how long a call may take before a test decides it is
// blocked. Nothing here should take more than milliseconds; the bound is
// generous for loaded machines and is not a performance assertion.
const BlockLimit = 5 * time.Second

// ReturnsAtOnce runs fn on another goroutine and fails the test if it has
// not returned within BlockLimit. The assertion stays on the test
// goroutine.
func ReturnsAtOnce[T any](t testing.TB, what string, fn func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := fn()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-time.After(BlockLimit):
		t.Fatalf("%s blocked (no return within %s)", what, BlockLimit)
	}
	var zero T
	return zero, nil
}
