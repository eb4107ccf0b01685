package main

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// defaultAction gives sig (SIGINT or SIGQUIT) its default disposition in
// the kernel, and unblocks it in the calling thread, which it locks: the
// Go runtime's handler stays installed otherwise (signal.Reset keeps it,
// and for SIGQUIT it prints a stack dump and exits 2 rather than die by
// the signal).
func defaultAction(sig syscall.Signal) error {
	runtime.LockOSThread()
	// struct sigaction as the kernel takes it, all zero: SIG_DFL, no
	// flags, no restorer, an empty mask.
	var act [4]uint64
	if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); errno != 0 {
		return errno
	}
	var set unix.Sigset_t
	set.Val[0] |= 1 << (uint(sig) - 1) // signals 1 to 32 are in the first word
	return unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
}

// raise sends sig to the calling thread, as raise(3) does: unblocked
// there, it is delivered before the call returns.
func raise(sig syscall.Signal) {
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
}
