//go:build !linux

package e2e

import "syscall"

// procfsProofs: without /proc and pidfds (macOS) nothing can be proven, and
// the helpers in procs_test.go refuse to signal.
const procfsProofs = false

func pidfdOpen(int) (int, error) { return -1, syscall.ENOSYS }

func pidfdSignal(int, syscall.Signal) error { return syscall.ENOSYS }
