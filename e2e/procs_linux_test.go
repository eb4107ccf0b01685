package e2e

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// procfsProofs: Linux has /proc to read a process's identity from.
const procfsProofs = true

// pidfdOpen pins the process that has pid now; -1 (and no error) on a
// kernel without pidfds, where proofs fall back to the start time.
func pidfdOpen(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, syscall.ENOSYS) {
		return -1, nil
	}
	return fd, err
}

func pidfdSignal(fd int, sig syscall.Signal) error {
	return unix.PidfdSendSignal(fd, sig, nil, 0)
}
