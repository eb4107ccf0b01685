package runstore

// Shared fixtures, and the cross-process harness: flock(2) locks belong to
// open file descriptions, so what another crew process sees is proved with
// another process. The test binary re-executes itself with
// CREW_RUNSTORE_HELPER=<mode>:<arg>, and TestMain runs the helper instead of
// the tests. A helper prints a status line on stdout once it holds what it
// was asked to hold, then obeys commands read from stdin and exits on EOF.
// Every helper is SIGKILLed and reaped in t.Cleanup.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/helperproc"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/storetest"
	"github.com/crew-dev/crew/internal/vocab"
)

const (
	helperEnv     = "CREW_RUNSTORE_HELPER"
	helperTimeout = "CREW_RUNSTORE_TIMEOUT"
	helperID      = "CREW_RUNSTORE_ID"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHelper(spec))
	}
	os.Exit(m.Run())
}

func runHelper(spec string) int {
	mode, arg, _ := strings.Cut(spec, ":")
	fail := func(err error) int {
		fmt.Printf("error: %v\n", err)
		return 1
	}
	timeout := 10 * time.Second
	if s := os.Getenv(helperTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fail(err)
		}
		timeout = d
	}
	switch mode {
	case "hold-admission": // New(arg).LockAdmission, then hold it
		s := New(arg)
		fmt.Println("waiting")
		a, err := s.LockAdmission(context.Background(), timeout)
		var te *vocab.LockTimeoutError
		if errors.As(err, &te) {
			fmt.Printf("timeout %v\n", err)
			return 0
		}
		if err != nil {
			return fail(err)
		}
		fmt.Println("locked")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "release" {
				a.Release()
				fmt.Println("released")
			}
		}
		return 0

	case "hold-flock": // a bare exclusive flock on the file or directory arg, no holder note
		f, err := os.Open(arg)
		if err != nil {
			return fail(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return fail(err)
		}
		fmt.Println("locked")
		helperproc.WaitEOF()
		return 0

	case "reserve": // reserve run $CREW_RUNSTORE_ID in the state root arg and hold its locks
		s := New(arg)
		a, err := s.LockAdmission(context.Background(), timeout)
		if err != nil {
			return fail(err)
		}
		id := record.RunID(os.Getenv(helperID))
		locks, err := a.Reserve(testRecord(id, record.Provisioning))
		a.Release()
		if err != nil {
			return fail(err)
		}
		fmt.Println("reserved")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "finish" {
				if err := locks.Finish(testRecord(id, record.Succeeded)); err != nil {
					return fail(err)
				}
				fmt.Println("finished")
			}
		}
		return 0

	case "enqueue": // queue a ticket $CREW_RUNSTORE_ID in the state root arg and wait
		s := New(arg)
		a, err := s.LockAdmission(context.Background(), timeout)
		if err != nil {
			return fail(err)
		}
		w, err := a.Enqueue(testTicket(record.RunID(os.Getenv(helperID)), "queued-task"))
		a.Release()
		if err != nil {
			return fail(err)
		}
		return storetest.WaitInLine(w)
	}
	return fail(fmt.Errorf("unknown helper mode %q", mode))
}

// helper is a helper process: this test binary run again as one mode.
type helper = helperproc.Process

// startHelper starts the test binary as helper mode:arg, with extra
// environment variables.
func startHelper(t *testing.T, mode, arg string, env ...string) *helper {
	t.Helper()
	return helperproc.Start(t, append([]string{helperEnv + "=" + mode + ":" + arg}, env...))
}

// Fixtures.

const testID = storetest.ID

// testRecord is a valid record of run id in state.
func testRecord(id record.RunID, state record.State) *record.Run { return storetest.Record(id, state) }

func testTicket(id record.RunID, task string) *record.Ticket { return storetest.Ticket(id, task) }

// idAt makes a deterministic run id for a creation time and a suffix.
func idAt(tm time.Time, n int) record.RunID { return storetest.IDAt(tm, n) }

// newStore is an ensured state root in a fresh directory.
func newStore(t testing.TB) *Store {
	t.Helper()
	return storetest.Ensured(t, New(storetest.RootPath(t)))
}

// path is the full path of a file of the state root, for the test's own
// checks and fixtures (which use os.* directly, as an outsider would).
func (s *Store) osPath(rel ...string) string { return s.display(rel...) }

// lockAdmission takes the admission lock or fails the test; it is released
// in t.Cleanup (releasing twice is harmless).
func lockAdmission(t testing.TB, s *Store) *Admission {
	t.Helper()
	a, err := s.LockAdmission(context.Background(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Release)
	return a
}

// mustWriteActive writes rec into the active set, durably.
func mustWriteActive(t testing.TB, s *Store, rec *record.Run) {
	t.Helper()
	if err := s.writeActive(rec, durable); err != nil {
		t.Fatal(err)
	}
}

func mustWriteDone(t testing.TB, s *Store, rec *record.Run) {
	t.Helper()
	if err := s.writeDone(rec); err != nil {
		t.Fatal(err)
	}
}

func writeString(t testing.TB, path, content string) {
	t.Helper()
	storetest.WriteString(t, path, content)
}
func readString(t testing.TB, path string) string { t.Helper(); return storetest.ReadString(t, path) }
func mkdirAll(t testing.TB, path string)          { t.Helper(); storetest.MkdirAll(t, path) }

func assertOnlyFiles(t testing.TB, dir string, want ...string) {
	t.Helper()
	storetest.AssertOnlyFiles(t, dir, want...)
}

func assertMode(t testing.TB, path string, want os.FileMode) {
	t.Helper()
	storetest.AssertMode(t, path, want)
}

func assertMissing(t testing.TB, path string) { t.Helper(); storetest.AssertMissing(t, path) }
func assertExists(t testing.TB, path string)  { t.Helper(); storetest.AssertExists(t, path) }

// holdLock takes the lock file at rel/name as another open file
// description would (another process, for flock): through a root of its
// own. It is released in t.Cleanup.
func holdLock(t testing.TB, s *Store, rel, name string) func() {
	t.Helper()
	r, err := os.OpenRoot(s.osPath(rel))
	if err != nil {
		t.Fatal(err)
	}
	f, err := r.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("hold %s/%s: %v", rel, name, err)
	}
	var once sync.Once
	release := func() { once.Do(func() { f.Close(); r.Close() }) }
	t.Cleanup(release)
	return release
}

// blockedOn waits until process pid is blocked in flock on the file at
// path.
func blockedOn(t *testing.T, path string, pid int) { helperproc.BlockedOn(t, path, pid) }

// mkfifo makes a FIFO nobody writes to (storetest.Mkfifo).
func mkfifo(t testing.TB, path string) { t.Helper(); storetest.Mkfifo(t, path) }

// returnsAtOnce runs fn and fails the test if it blocks
// (storetest.ReturnsAtOnce).
func returnsAtOnce[T any](t testing.TB, what string, fn func() (T, error)) (T, error) {
	t.Helper()
	return storetest.ReturnsAtOnce(t, what, fn)
}
