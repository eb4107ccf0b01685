package supervise

import "syscall"

// childEvent is a change in the command's state, seen without reaping it.
type childEvent struct {
	// exited: the command's leader has exited. Unless reaped is set it is
	// a zombie still, which keeps its pid, and so its process group's id,
	// from passing to anyone else until child.reap reaps it.
	exited bool
	// reaped: the watcher had to reap the leader to see it exit (a
	// system without waitid's WNOWAIT or kqueue): the group's id is no
	// longer pinned, so nothing may be sent to the group any more.
	reaped bool
	// stopSig is the signal that stopped the command (exited is false).
	stopSig syscall.Signal
}
