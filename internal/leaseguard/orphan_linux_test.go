package leaseguard

import (
	"testing"

	"golang.org/x/sys/unix"
)

// killOrphan kills pid, a process the test did not start (a broken guard's
// leftover), only if it is provably the one meant: a pidfd pins one
// process, and stillOpen (a pipe that only that process holds is not at
// EOF), checked after the pidfd was opened, proves the pinned process is it.
func killOrphan(t *testing.T, pid int, stillOpen func() bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Logf("cannot clean up pid %d: %v", pid, err)
		return
	}
	defer unix.Close(fd)
	if !stillOpen() {
		return
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		t.Logf("cannot clean up pid %d: %v", pid, err)
	}
}
