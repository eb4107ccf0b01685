package main

import (
	"os"
	"os/signal"
	"syscall"
)

// surviveBrokenPipes makes a write to a closed stdout or stderr fail with
// EPIPE instead of killing crew, for the commands that must outlive their
// readers: `crew start ... | head -1` still has a run to record.
//
// Go kills a program that writes to a broken pipe on fd 1 or 2 unless
// SIGPIPE is subscribed to. It is subscribed to, not ignored: exec resets a
// handled signal to its default in the command, but an ignored one would
// be inherited, and `yes | head -1` inside the command would no longer end
// by SIGPIPE. Nobody reads the channel: the signal carries no news the
// failed write does not.
func surviveBrokenPipes() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}
