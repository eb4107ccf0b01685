package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRemovingLocksDirDuringAdmission: someone deletes .locks/ while a
// start is inside the admission critical section. A second start must not
// get in beside it (at cap 1 it would be admitted as soon as it locked a
// fresh lock file): the admission lock is the state root directory itself.
func TestRemovingLocksDirDuringAdmission(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	gate, openGate := e.gate("inside")
	first := e.start([]string{"CREW_FAILPOINT=admission-locked:wait:" + gate}, "start", "first", "--", "true")
	eventually(t, 10*time.Second, "the first start to be inside admission", func() bool { return exists(gate + ".reached") })
	require.NoError(t, os.RemoveAll(filepath.Join(e.root, ".locks")))

	r := e.run("start", "--lock-timeout", "500ms", "second", "--", "true")
	assert.Equal(t, 125, r.Code, "the second start must wait for the first: %s", r.Stderr)
	assert.Contains(t, r.Stderr, "timed out after")
	assert.Empty(t, e.status("second").Finished, "the second start never ran")

	openGate()
	assert.Equal(t, 0, first.wait(t, 10*time.Second).Code)
	r = e.run("start", "second", "--", "true")
	assert.Equal(t, 0, r.Code, "once the first is done, the second gets in: %s", r.Stderr)
}

// TestReplacedOwnerLockFile: a living run's owner lock file is removed and
// an empty one put in its place. The run still holds its slot (crew asks
// the kernel about the file the run really locked), a second start is
// refused at cap 1, and the run finishes normally; once its processes are
// gone without finalizing, the replaced file does not keep the slot held.
func TestReplacedOwnerLockFile(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	gate, openGate := e.gate("release")
	first := e.start(nil, append([]string{"start", "first", "--"}, waitCmd(gate)...)...)
	run := e.activeRun("first")
	replaceFile(t, filepath.Join(e.root, "owners", run.RunID+".lock"))

	s := e.status()
	require.Len(t, s.Active, 1)
	assert.True(t, s.Active[0].OwnerAlive, "the run still lives")
	assert.True(t, s.Active[0].HoldsSlot)
	assert.Equal(t, 1, s.SlotsInUse)
	r := e.run("start", "second", "--", "true")
	assert.Equal(t, 75, r.Code, "a replaced lock file must not free the slot: %s", r.Stderr)

	openGate()
	assert.Equal(t, 0, first.wait(t, 10*time.Second).Code)
	assert.Equal(t, "succeeded", e.runRecord(run.RunID).State)
	r = e.run("start", "second", "--", "true")
	assert.Equal(t, 0, r.Code, r.Stderr)
}

// TestReplacedOwnerLockFileOfADeadRun: the lock file of a run is replaced,
// and then every process of the run dies. The kernel no longer holds the
// original, so the run is dead: the next start finalizes it and gets in.
func TestReplacedOwnerLockFileOfADeadRun(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	gate, _ := e.gate("never")
	first := e.start(nil, append([]string{"start", "first", "--"}, waitCmd(gate)...)...)
	run := e.activeRun("first")
	e.killRunAtCleanup(run)
	replaceFile(t, filepath.Join(e.root, "owners", run.RunID+".lock"))

	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	first.wait(t, 10*time.Second)
	require.NoError(t, e.proveRunGroup(run).signal(syscall.SIGKILL))
	eventually(t, 10*time.Second, "the run's owner to be gone", func() bool { return !e.status().Active[0].OwnerAlive })

	r := e.run("start", "second", "--", "true")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "interrupted", e.runRecord(run.RunID).State)
}

// replaceFile removes path and puts an empty file in its place.
func replaceFile(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, nil, 0o600))
}
