package supervise

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// unrecordable reserves a run and makes its final record unwritable: the
// finished runs' directory becomes a file. It returns the supervisor, with
// the run's end described, and a function that makes the record writable
// again.
func unrecordable(t *testing.T, warn func(error)) (*supervisor, func()) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "state")
	st := runstore.New(root)
	t.Cleanup(func() { st.Close() })
	now := time.Now().UTC()
	rec := &record.Run{Version: record.RecordVersion, RunID: record.NewRunID(now), Task: "t", State: record.Provisioning,
		Command: []string{"true"}, Host: "h", CreatedAt: now, SupervisorPID: os.Getpid()}
	adm, err := st.LockAdmission(context.Background(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	locks, err := adm.Reserve(rec)
	adm.Release()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(locks.Release)
	done := filepath.Join(root, "runs", "done")
	if err := os.Remove(done); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(done, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fix := func() {
		_ = os.Remove(done)
		_ = os.Mkdir(done, 0o700)
	}
	code := 0
	rec.Finish(record.Succeeded, now, &code, "")
	return newSupervisor(Request{Run: locks, Logs: st, Rec: rec, Warn: warn}), fix
}

type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) add(err error) { w.mu.Lock(); w.msgs = append(w.msgs, err.Error()); w.mu.Unlock() }

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// The supervisor retries for finishRetryFor, says so once, then gives up
// with an UnrecordedError, leaving the outcome for recovery.
func TestFinishGivesUpAfterTheBound(t *testing.T) {
	defer func(d time.Duration) { finishRetryFor = d }(finishRetryFor)
	finishRetryFor = 250 * time.Millisecond
	var w warnings
	s, _ := unrecordable(t, w.add)
	begin := time.Now()
	err := s.finish()
	var u *vocab.UnrecordedError
	if !errors.As(err, &u) || !u.Kept || u.Outcome != "succeeded, exit 0" {
		t.Fatalf("finish() = %v, want an UnrecordedError with the outcome kept", err)
	}
	if took := time.Since(begin); took < finishRetryFor {
		t.Errorf("gave up after %s, before the bound %s", took, finishRetryFor)
	}
	if !strings.Contains(err.Error(), "(gave up after 250ms); the outcome is kept in "+s.Run.OutcomePath()) {
		t.Errorf("error: %v", err)
	}
	if msgs := w.all(); len(msgs) != 1 || !strings.Contains(msgs[0], "ended (succeeded, exit 0), but crew cannot record it: ") {
		t.Errorf("warnings %q, want one notice", msgs)
	}
	if s.done {
		t.Error("the run counts as recorded")
	}
	// Kept in the run's own record file, where its slot was allocated at
	// reservation: a finished leftover in the active set.
	if !strings.HasSuffix(s.Run.OutcomePath(), filepath.Join("runs", "active", string(s.rec.RunID)+".run")) {
		t.Errorf("outcome kept in %s", s.Run.OutcomePath())
	}
	if kept, err := s.Logs.ReadActive(s.rec.RunID); err != nil || kept.State != record.Succeeded {
		t.Errorf("kept outcome = %+v, %v", kept, err)
	}
}

// Once the record can be written again, the retry records it and the run
// is done.
func TestFinishRetrySucceedsOnceWritable(t *testing.T) {
	var fix func()
	var w warnings
	s, fix := unrecordable(t, func(err error) {
		w.add(err)
		if strings.Contains(err.Error(), "cannot record it") {
			fix() // as if space came back while crew waits
		}
	})
	if err := s.finish(); err != nil {
		t.Fatal(err)
	}
	if !s.done {
		t.Error("not done")
	}
	msgs := w.all()
	if len(msgs) != 2 || !strings.Contains(msgs[1], "its end is recorded after all (succeeded, exit 0)") {
		t.Errorf("warnings %q", msgs)
	}
	if rec, err := s.Logs.ReadDone(s.rec.RunID); err != nil || rec.State != record.Succeeded {
		t.Errorf("final record %+v, %v", rec, err)
	}
}

// A stop signal while retrying gives up at once.
func TestFinishRetryGivesUpOnASignal(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGINT
	s, _ := unrecordable(t, nil)
	s.Signals = sigs
	err := s.finish()
	var u *vocab.UnrecordedError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "(gave up on receiving SIGINT)") {
		t.Fatalf("finish() = %v", err)
	}
}
