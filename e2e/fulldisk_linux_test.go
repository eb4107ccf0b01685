//go:build linux

package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tinyDisk mounts a 1 MiB tmpfs for the test's state root and unmounts it
// when the test ends (after every crew the test started is gone: cleanups
// run last-registered first). It skips the test where it cannot mount.
func tinyDisk(t *testing.T) (dir string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "disk")
	require.NoError(t, os.Mkdir(dir, 0o700))
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=1m,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v): needs root or CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v; detaching it", dir, err)
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}

// fill writes a file until the disk is full and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			require.True(t, errors.Is(err, syscall.ENOSPC), "filling the disk: %v", err)
			return path
		}
	}
}

// A real full disk: the command exits 0 after the state root's filesystem
// filled up. crew used to exit 125 at once and `crew recover` recorded the
// run "interrupted ... exit status unknown". Now crew keeps the outcome in
// the owner lock file, retries while holding the slot, and, told to give
// up, exits 125; recover cannot record the run while the disk is full (and
// loses nothing trying); once space is back, recover records it:
// succeeded, exit 0.
func TestRealFullDiskKeepsTheExitStatus(t *testing.T) {
	disk := tinyDisk(t)
	e := newEnv(t)
	e.root = filepath.Join(disk, "state")
	e.initMax(2)
	p, id, openGate := e.startUnrecordable("full", "")
	filler := fill(t, disk)
	openGate()
	awaitNotice(t, e, p, id)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT)) // our own child
	r := p.wait(t, 10*time.Second)
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "no space left on device (gave up on receiving SIGINT); the outcome is kept in ")

	rep, rr := e.recover()
	assert.Equal(t, 1, rr.Code, "recover cannot record it on a full disk: %s", rr.Stdout)
	assert.Equal(t, []string{"failed"}, rep.outcomesFor(id))
	for _, it := range rep.Items {
		if it.RunID == id {
			assert.Contains(t, it.Reason, "no space left on device")
		}
	}

	require.NoError(t, os.Remove(filler))
	rep, rr = e.recover()
	require.Equal(t, 0, rr.Code, rr.Stdout+rr.Stderr)
	assert.Equal(t, []string{"finalized"}, rep.outcomesFor(id))
	rec := e.runRecord(id)
	assert.Equal(t, "succeeded", rec.State)
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 0, *rec.ExitCode)
	assert.Contains(t, rec.Reason, "could not record this end (record run "+id+" as succeeded in ")
	assert.Contains(t, rec.Reason, ": no space left on device) and kept it in the owner lock file")
}

// Space comes back while crew retries: it records the run itself and
// exits 0.
func TestRealFullDiskSpaceComesBack(t *testing.T) {
	disk := tinyDisk(t)
	e := newEnv(t)
	e.root = filepath.Join(disk, "state")
	p, id, openGate := e.startUnrecordable("full", "")
	filler := fill(t, disk)
	openGate()
	awaitNotice(t, e, p, id)
	require.NoError(t, os.Remove(filler))
	r := p.wait(t, 20*time.Second)
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.True(t, strings.Contains(r.Stderr, "its end is recorded after all (succeeded, exit 0)"), r.Stderr)
	rec := e.runRecord(id)
	assert.Equal(t, "succeeded", rec.State)
	assert.Empty(t, rec.Reason)
}
