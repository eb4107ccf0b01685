package recovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

// reserveRun makes a running run whose supervisor holds its locks.
func reserveRun(t *testing.T) (*runstore.Store, *record.Run, *runstore.RunLocks) {
	return reserveRunAs(t, false)
}

// reserveRunAs makes a running run whose supervisor holds its locks; with
// v1, the run of a crew of state-root version 1 (a JSON record, whose
// supervisor keeps an outcome in its owner lock file).
func reserveRunAs(t *testing.T, v1 bool) (*runstore.Store, *record.Run, *runstore.RunLocks) {
	t.Helper()
	st := runstore.New(filepath.Join(t.TempDir(), "state"))
	t.Cleanup(func() { st.Close() })
	now := time.Now().UTC()
	rec := &record.Run{Version: record.RecordVersion, RunID: record.NewRunID(now), Task: "t", State: record.Provisioning,
		Command: []string{"true"}, Host: "h", CreatedAt: now, SupervisorPID: 4711}
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
	rec.State, rec.TaskPID = record.Running, 4712
	if !v1 {
		if err := locks.Update(rec); err != nil {
			t.Fatal(err)
		}
		return st, rec, locks
	}
	// The same run as an older crew keeps it: its record <id>.json, and
	// locks this process holds without the slot file open.
	if err := os.Remove(filepath.Join(st.Root(), "runs", "active", string(rec.RunID)+".run")); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateActive(rec); err != nil {
		t.Fatal(err)
	}
	old, err := st.AdoptRunLocks(rec.RunID, locks.OwnerFile(), locks.SupervisorFile())
	if err != nil {
		t.Fatal(err)
	}
	return st, rec, old
}

// A supervisor that could not move its final record into runs/done keeps
// it in the run's own file, in the slot allocated at reservation: the
// run is a finished leftover, finalized as it ended.
func TestFinalizeDeadMovesAFinalRecordKeptInPlace(t *testing.T) {
	st, rec, locks := reserveRun(t)
	code := 3
	end := time.Now().UTC()
	rec.Finish(record.Failed, end, &code, "command exited with status 3")
	if err := locks.KeepOutcome(rec, errors.New("record run: no space left on device")); err != nil {
		t.Fatal(err)
	}
	if active, err := st.ReadActive(rec.RunID); err != nil || active.State != record.Failed {
		t.Fatalf("active record after KeepOutcome: %+v, %v", active, err)
	}
	locks.Release() // the supervisor gave up and exited

	outcome, got, err := FinalizeDead(st, rec.RunID, time.Now())
	if err != nil || outcome != backend.LeftoverRemoved {
		t.Fatalf("FinalizeDead = %v, %+v, %v", outcome, got, err)
	}
	if got.State != record.Failed || got.ExitCode == nil || *got.ExitCode != 3 || !got.FinishedAt.Equal(end) || got.Reason != "command exited with status 3" {
		t.Errorf("final record: %s, exit %v, finished %v, %q", got.State, got.ExitCode, got.FinishedAt, got.Reason)
	}
	if done, err := st.ReadDone(rec.RunID); err != nil || done.State != record.Failed {
		t.Errorf("finished record %+v, %v", done, err)
	}
	if _, err := st.ReadActive(rec.RunID); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("still in the active set: %v", err)
	}
}

// A dead run whose supervisor kept its outcome is finalized as it ended,
// not as interrupted, with a reason that says who recorded it and why.
func TestFinalizeDeadRecordsAKeptOutcome(t *testing.T) {
	st, rec, locks := reserveRunAs(t, true)
	code := 3
	end := time.Now().UTC()
	rec.Finish(record.Failed, end, &code, "command exited with status 3")
	if err := locks.KeepOutcome(rec, errors.New("record run: no space left on device")); err != nil {
		t.Fatal(err)
	}
	locks.Release() // the supervisor gave up and exited

	outcome, got, err := FinalizeDead(st, rec.RunID, time.Now())
	if err != nil || outcome != backend.Reaped {
		t.Fatalf("FinalizeDead = %v, %+v, %v", outcome, got, err)
	}
	if got.State != record.Failed || got.ExitCode == nil || *got.ExitCode != 3 || !got.FinishedAt.Equal(end) {
		t.Errorf("final record: %s, exit %v, finished %v", got.State, got.ExitCode, got.FinishedAt)
	}
	want := "command exited with status 3; its supervisor (pid 4711) could not record this end (record run: no space left on device) and kept it in the owner lock file; crew process "
	if !strings.HasPrefix(got.Reason, want) {
		t.Errorf("reason %q, want it to start %q", got.Reason, want)
	}
	if done, err := st.ReadDone(rec.RunID); err != nil || done.State != record.Failed {
		t.Errorf("finished record %+v, %v", done, err)
	}
}

// Without a kept outcome (or with one that is not this run's), the run is
// interrupted with its exit status unknown, as before.
func TestFinalizeDeadWithoutAnOutcome(t *testing.T) {
	st, rec, locks := reserveRun(t)
	lockPath := filepath.Join(st.Root(), "owners", string(rec.RunID)+".lock")
	if err := os.WriteFile(lockPath, []byte("crew-outcome-v1 {\"runId\": \"r-other\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	locks.Release()
	_, got, err := FinalizeDead(st, rec.RunID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got.State != record.Interrupted || got.ExitCode != nil || !strings.Contains(got.Reason, "exit status unknown") ||
		!strings.Contains(got.Reason, "an outcome kept in the owner lock file could not be used") {
		t.Errorf("final record: %s, exit %v, %q", got.State, got.ExitCode, got.Reason)
	}
}
