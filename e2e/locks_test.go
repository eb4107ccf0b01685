package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRemovingLocksDirDuringAdmission: someone deletes .locks/ while a
// start is inside the admission critical section. A second start must not
// get in beside it (at cap 1 it would be admitted as soon as it locked a
// fresh lock file): whoever makes the admission lock file anew waits until
// nobody holds the state root directory, which everyone inside admission
// holds shared.
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

// The admission lock is the dedicated file .locks/dispatch-admission.lock:
// while a start is inside admission, the kernel's lock table shows its
// exclusive flock on that file's inode (and its shared one on the state
// root directory), and the file is never replaced: its inode is the same
// across starts, waiting starts, crew recover and crew stop.
func TestAdmissionLockIsTheDedicatedFile(t *testing.T) {
	if _, err := os.Stat("/proc/locks"); err != nil {
		t.Skip("no kernel lock table to read here")
	}
	e := newEnv(t)
	e.initMax(1)
	lock := filepath.Join(e.root, ".locks", "dispatch-admission.lock")
	ino := func() uint64 { return assertAdmissionLockFile(t, e.root).Sys().(*syscall.Stat_t).Ino }
	first := ino()

	gate, openGate := e.gate("inside")
	inside := e.start([]string{"CREW_FAILPOINT=admission-locked:wait:" + gate}, "start", "inside", "--", "true")
	waitReached(t, gate)
	held := kernelFlocks(t, inside.cmd.Process.Pid)
	assert.Equal(t, "WRITE", held[fileIno(t, lock)], "an exclusive flock on the admission lock file: %v", held)
	assert.Equal(t, "READ", held[fileIno(t, e.root)], "a shared flock on the state root directory: %v", held)
	assert.Len(t, held, 2, "nothing else is locked inside admission: %v", held)
	openGate()
	require.Equal(t, 0, inside.wait(t, 10*time.Second).Code)

	release, holder := e.holdSlot("holder")
	r := e.run("start", "--wait=100ms", "waiter", "--", "true")
	assert.Equal(t, 75, r.Code, r.Stderr)
	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	rep, r := e.recover()
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Zero(t, rep.changes(), "%+v", rep.Items)
	require.Equal(t, 0, e.run("start", "after", "--", "true").Code)
	assert.Equal(t, first, ino(), "the admission lock file was replaced")
}

// kernelFlocks is what /proc/locks shows process pid holding: the kind of
// flock (READ or WRITE) by inode.
func kernelFlocks(t *testing.T, pid int) map[uint64]string {
	t.Helper()
	b, err := os.ReadFile("/proc/locks")
	require.NoError(t, err)
	out := map[uint64]string{}
	for _, line := range strings.Split(string(b), "\n") {
		// 1: FLOCK  ADVISORY  WRITE 4711 fe:00:9980352 0 EOF
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" || f[4] != fmt.Sprint(pid) {
			continue
		}
		var ino uint64
		_, err := fmt.Sscan(f[5][strings.LastIndexByte(f[5], ':')+1:], &ino)
		require.NoError(t, err, line)
		out[ino] = f[3]
	}
	return out
}

func fileIno(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Sys().(*syscall.Stat_t).Ino
}

// crew releases before the dedicated lock file took their admission lock
// as an exclusive flock of the state root directory itself. During an
// upgrade both may share a root: each keeps the other out of admission.
// (An older crew is played here by a flock of the state root directory,
// which is all of its admission lock.)
func TestOlderCrewAndThisOneShareARoot(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	older, err := os.Open(e.root)
	require.NoError(t, err)
	defer older.Close()

	// An older crew is inside admission: this one waits for it.
	require.NoError(t, syscall.Flock(int(older.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
	r := e.run("start", "--lock-timeout", "300ms", "newer", "--", "true")
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "timed out after")
	assert.Empty(t, e.status("newer").Finished, "the newer start never ran")
	require.NoError(t, syscall.Flock(int(older.Fd()), syscall.LOCK_UN))

	// This one is inside admission: an older crew cannot get in.
	gate, openGate := e.gate("inside")
	inside := e.start([]string{"CREW_FAILPOINT=admission-locked:wait:" + gate}, "start", "newer", "--", "true")
	waitReached(t, gate)
	assert.ErrorIs(t, syscall.Flock(int(older.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), syscall.EWOULDBLOCK,
		"an older crew got into admission beside this one")
	openGate()
	require.Equal(t, 0, inside.wait(t, 10*time.Second).Code)
	require.NoError(t, syscall.Flock(int(older.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), "free once this one is out")
}

// Something planted at the admission lock's name is moved into
// quarantine/ with a note, never locked, opened or followed, and a fresh
// lock file takes its place.
func TestPlantedAdmissionLockFileIsMovedAside(t *testing.T) {
	plants := map[string]func(t *testing.T, e *env, path, canary string){
		"link":             func(t *testing.T, _ *env, path, canary string) { symlinkAt(t, canary, path) },
		"dangling link":    func(t *testing.T, _ *env, path, canary string) { symlinkAt(t, canary+".missing", path) },
		"link to a device": func(t *testing.T, _ *env, path, _ string) { symlinkAt(t, "/dev/zero", path) },
		"hard link":        func(t *testing.T, _ *env, path, canary string) { hardlinkAt(t, canary, path) },
		"FIFO":             func(t *testing.T, _ *env, path, _ string) { mkfifoAt(t, path) },
		"directory": func(t *testing.T, _ *env, path, _ string) {
			require.NoError(t, os.MkdirAll(filepath.Join(path, "inside"), 0o700))
		},
	}
	for name, plant := range plants {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.initMax(1)
			canary := filepath.Join(e.dir, "canary")
			require.NoError(t, os.WriteFile(canary, []byte("canary"), 0o600))
			lock := filepath.Join(e.root, ".locks", "dispatch-admission.lock")
			require.NoError(t, os.Remove(lock))
			plant(t, e, lock, canary)

			r := e.bounded(hangLimit, nil, "start", "x", "--", "true")
			assert.Equal(t, 0, r.Code, r.Stderr)
			assertAdmissionLockFile(t, e.root)
			assertQuarantined(t, e.root, "dispatch-admission.lock")
			b, err := os.ReadFile(canary)
			require.NoError(t, err)
			assert.Equal(t, "canary", string(b))
			_, err = os.Stat(canary + ".missing")
			assert.ErrorIs(t, err, os.ErrNotExist, "nothing was created through the dangling link")
		})
	}
}
