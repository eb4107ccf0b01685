package supervise

import (
	"os"
	"syscall"
	"time"
)

// stopRecord remembers a stop signal crew received and how it was carried
// out.
type stopRecord struct {
	sig    syscall.Signal
	killed bool // SIGKILL after the grace period
}

// wait supervises the running command: it forwards stop signals to the
// process group, escalates to SIGKILL after the grace period, and returns
// the command's wait status.
func (s *supervisor) wait() (syscall.WaitStatus, *stopRecord) {
	waitErr := make(chan error, 1)
	go func() { waitErr <- s.cmd.Wait() }()
	var stop *stopRecord
	var grace <-chan time.Time
	for {
		select {
		case sig := <-s.Signals:
			ss := asSignal(sig)
			if stop == nil {
				stop = &stopRecord{sig: ss}
				grace = time.After(s.Grace)
			}
			_ = syscall.Kill(-s.pgid, ss)
		case <-grace:
			stop.killed = true
			_ = syscall.Kill(-s.pgid, syscall.SIGKILL)
		case <-waitErr:
			if stop != nil {
				// The run was told to stop: what is left of its group goes too.
				_ = syscall.Kill(-s.pgid, syscall.SIGKILL)
			}
			ws, _ := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
			return ws, stop
		}
	}
}

func asSignal(sig os.Signal) syscall.Signal {
	if ss, ok := sig.(syscall.Signal); ok {
		return ss
	}
	return syscall.SIGTERM
}

func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
