package dispatch_test

// Regression tests for bugs found while writing the unit tests: a failing
// output stream that hung the run, a task admitted beside its own dead
// record, and a dry-run recovery that broke concurrent admissions.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/vocab"
)

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// When crew's own stdout fails (a full disk, a closed pipe), the copy
// goroutine in output.go stopped reading the command's pipe but kept it
// open, so a command with more than a pipe buffer of output blocked in
// write(2) forever, holding its slot; Start never returned. From a shell:
// `crew start x -- head -c 1000000 /dev/zero > /dev/full` hung. Now crew
// keeps reading into the log, so the command is not disturbed at all.
func TestRegressionFailingOutputHangsTheRun(t *testing.T) {
	d := newDispatcher(t)
	req, _, _ := startRequest("writer", "head", "-c", "1000000", "/dev/zero")
	req.Stdout = failingWriter{}
	var warnings []string
	req.Warn = func(err error) { warnings = append(warnings, err.Error()) }
	done := make(chan startResult, 1)
	go func() {
		code, id, err := startCode(d, req)
		done <- startResult{code, id, err}
	}()
	select {
	case r := <-done:
		assert.Equal(t, 0, r.code, "the command never saw crew's output fail: %v", r.err)
		fi, err := os.Stat(d.Logs.Logs().LogPath(r.id))
		require.NoError(t, err)
		assert.EqualValues(t, 1000000, fi.Size(), "the log has everything")
		require.Len(t, warnings, 1)
		assert.Contains(t, warnings[0], "crew's stdout failed (no space left on device); the command's output went on into the log "+d.Logs.Logs().LogPath(r.id))
	case <-time.After(10 * time.Second):
		killActive(d)
		<-done
		t.Fatal("Start did not return: the command blocked on a pipe nobody reads")
	}
}

// Admission finalizes at most maxReapsPerAdmission dead runs; a dead
// record past that bound is left active and is not in byTask, so a new run
// of its task is admitted next to it: two active records for one task
// (DESIGN.md invariant 5; the comment in scanActive says finalizing is
// there "so that a task never has two active records").
func TestRegressionTwoActiveRecordsForOneTask(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 10)
	var dead []*dispatch.Reservation
	for i := range 5 {
		dead = append(dead, admit(t, d, fmt.Sprintf("task-%d", i)))
	}
	for _, r := range dead {
		releaseAll(r)
	}
	admit(t, d, "task-4")
	snap, err := d.Status(vocab.StatusQuery{Task: "task-4"})
	require.NoError(t, err)
	assert.Len(t, snap.Active, 1, "one active record per task")
}

// `crew recover --dry-run` probes (flock LOCK_SH) every lock file in
// owners/ without an active record, outside the admission lock. A new
// run's lock file is exactly that between its O_EXCL create and its
// LOCK_EX|LOCK_NB in lockfs.CreateOwner, so a concurrent dry run makes
// the reservation fail with EWOULDBLOCK ("lock new owner lock ...:
// resource temporarily unavailable"): crew start exits 125. Probabilistic:
// the window is microseconds wide; with 8 dry runs looping, a few
// admissions in a thousand failed here. It is a soak test: every CI pass
// runs sixty admissions, `make soak` (CREW_SOAK=1) runs it for 20 s.
func TestRegressionDryRunRecoverBreaksConcurrentAdmission(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1000)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				_, _ = d.Admin().Recover(dispatch.RecoverOptions{DryRun: true, Timeout: time.Minute})
			}
		}()
	}
	var failures []error
	admitted := 0
	for n, deadline := 0, time.Now().Add(soakFor(20*time.Second)); n < soakRounds(60) || time.Now().Before(deadline); n++ {
		res, err := d.Admit(context.Background(), admitReq("t"))
		if err != nil {
			failures = append(failures, err)
			continue
		}
		admitted++
		releaseAll(res)
	}
	stop.Store(true)
	wg.Wait()
	assert.Empty(t, failures)
	assert.Positive(t, admitted, "no admission won: the test proved nothing")
}
