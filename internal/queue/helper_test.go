package queue_test

// The cross-process harness: a waiter in another process is what a ring
// must wake. The test binary re-executes itself with
// CREW_QUEUE_HELPER=enqueue:<state root>, and TestMain runs the helper
// instead of the tests (see package helperproc).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/storetest"
)

const (
	helperEnv = "CREW_QUEUE_HELPER"
	helperID  = "CREW_QUEUE_ID"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHelper(spec))
	}
	os.Exit(m.Run())
}

// runHelper "enqueue:ROOT" queues a ticket $CREW_QUEUE_ID in the state
// root ROOT and waits in line.
func runHelper(spec string) int {
	root, ok := strings.CutPrefix(spec, "enqueue:")
	if !ok {
		fmt.Printf("error: unknown helper %q\n", spec)
		return 1
	}
	a, err := runstore.New(root).LockAdmission(context.Background(), 10*time.Second)
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 1
	}
	w, err := a.Enqueue(storetest.Ticket(record.RunID(os.Getenv(helperID)), "queued-task"))
	a.Release()
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 1
	}
	return storetest.WaitInLine(w)
}

// newStore is an ensured state root in a fresh directory.
func newStore(t testing.TB) *runstore.Store {
	t.Helper()
	return storetest.Ensured(t, runstore.New(storetest.RootPath(t)))
}

// osPath is the full path of a file of the state root, for the test's own
// checks and fixtures (which use os.* directly, as an outsider would).
func osPath(s *runstore.Store, rel ...string) string {
	return filepath.Join(append([]string{s.Root()}, rel...)...)
}

// lockAdmission takes the admission lock or fails the test; it is released
// in t.Cleanup (releasing twice is harmless).
func lockAdmission(t testing.TB, s *runstore.Store) *runstore.Admission {
	t.Helper()
	a, err := s.LockAdmission(context.Background(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Release)
	return a
}

// enqueue puts a start of task in line as id; it leaves at t.Cleanup.
func enqueue(t *testing.T, s *runstore.Store, id record.RunID, task string) *queue.Waiter {
	t.Helper()
	a := lockAdmission(t, s)
	defer a.Release()
	w, err := a.Enqueue(storetest.Ticket(id, task))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Remove)
	return w
}
