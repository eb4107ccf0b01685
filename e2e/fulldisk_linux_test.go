//go:build linux

package e2e

import (
	"errors"
	"os"
	"path/filepath"
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
// run "interrupted ... exit status unknown"; then it kept the outcome in
// the owner lock file and retried. Now the final record goes into the
// slot its record file was given at admission, and the file is moved
// (no new file, no new data block): crew records the run itself, on the
// full disk, and exits with the command's code.
func TestRealFullDiskKeepsTheExitStatus(t *testing.T) {
	disk := tinyDisk(t)
	e := newEnv(t)
	e.root = filepath.Join(disk, "state")
	e.initMax(2)
	p, id, openGate := e.startUnrecordable("full", "")
	filler := fill(t, disk)
	openGate()
	r := p.wait(t, 20*time.Second)
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.NotContains(t, r.Stderr, "cannot record it")
	rec := e.runRecord(id)
	assert.Equal(t, "succeeded", rec.State)
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 0, *rec.ExitCode)
	assert.Empty(t, rec.Reason)
	assert.FileExists(t, doneRecordPath(t, e.root, id))
	rep, rr := e.recover()
	require.Equal(t, 0, rr.Code, rr.Stdout+rr.Stderr)
	assert.Zero(t, rep.changes(), "nothing left for recover: %+v", rep.Items)
	require.NoError(t, os.Remove(filler))
}
