//go:build !linux

package main

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// defaultAction gives sig (SIGINT or SIGQUIT) its default disposition in
// the kernel: the Go runtime's handler stays installed otherwise
// (signal.Reset keeps it, and for SIGQUIT it prints a stack dump and
// exits 2 rather than die by the signal). Go's threads do not block it.
func defaultAction(sig syscall.Signal) error {
	// struct __sigaction, all zero: SIG_DFL, no trampoline, an empty
	// mask, no flags.
	var act [3]uint64
	if _, _, errno := syscall.RawSyscall(syscall.SYS_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0); errno != 0 {
		return errno
	}
	return nil
}

// raise sends sig to crew.
func raise(sig syscall.Signal) {
	_ = unix.Kill(unix.Getpid(), sig)
}
