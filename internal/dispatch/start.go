package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/runstore"
)

// StartRequest is one `crew start`.
type StartRequest struct {
	AdmitRequest
	// Grace is how long the command's process group has between the
	// forwarded signal and SIGKILL.
	Grace time.Duration
	// Stdin, Stdout and Stderr are the command's streams; Stdout and
	// Stderr are also copied to the run's log file.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Env is the command's environment before crew adds CREW_RUN_ID,
	// CREW_TASK and CREW_ROOT.
	Env []string
	// Signals delivers the stop signals crew received (SIGINT, SIGTERM,
	// SIGHUP); they are forwarded to the command's process group.
	Signals <-chan os.Signal
	// Warn receives warnings for the user (stderr).
	Warn func(string)
	// Detach hands the run to a supervisor process of its own and returns
	// once the command is running.
	Detach bool
}

// InternalError is crew failing after admission; the run is recorded as
// failed with a reason that starts "crew internal error:".
type InternalError struct {
	RunID runstore.RunID
	Err   error
}

func (e *InternalError) Error() string {
	return fmt.Sprintf("crew internal error in run %s: %v", e.RunID, e.Err)
}
func (e *InternalError) Unwrap() error { return e.Err }

// SignalledError is a start abandoned because crew was told to stop
// before the command ran.
type SignalledError struct {
	Signal syscall.Signal
	RunID  runstore.RunID // empty if no run was reserved
}

func (e *SignalledError) Error() string {
	if e.RunID == "" {
		return fmt.Sprintf("received %s while waiting for admission; nothing was started", signalName(e.Signal))
	}
	return fmt.Sprintf("received %s before the command started; run %s recorded as stopped", signalName(e.Signal), e.RunID)
}

// Start admits, launches and supervises one run, and returns the
// command's exit code (128+N if signal N killed it).
func (d *Dispatcher) Start(req StartRequest) (code int, runID runstore.RunID, err error) {
	warn := req.Warn
	if warn == nil {
		warn = func(string) {}
	}
	res, sig, err := d.admitInterruptibly(req)
	var refused *RefusedError
	switch {
	case res != nil:
		for _, w := range res.Warnings {
			warn(w)
		}
	case errors.As(err, &refused):
		for _, w := range refused.Warnings {
			warn(w)
		}
		d.recordRefusal(req.Task, refused)
	}
	if err != nil {
		if sig != 0 && res == nil {
			return 128 + int(sig), "", &SignalledError{Signal: sig}
		}
		return 0, "", err
	}
	failpoint.Hit("admitted")

	s := &supervisor{d: d, req: req, res: res, rec: res.Rec, warn: warn}
	if sig != 0 {
		return s.stopBeforeLaunch(sig)
	}
	if req.Detach {
		return d.detach(req, res)
	}
	return s.guarded()
}

// guarded runs the supervisor, turning a panic into a recorded failure.
func (s *supervisor) guarded() (code int, runID runstore.RunID, err error) {
	defer s.recoverPanic(&code, &runID, &err)
	return s.run()
}

// admitInterruptibly runs Admit while watching for stop signals: a signal
// while waiting for the admission lock abandons the wait; a signal that
// arrives once the run is reserved is returned so the run is recorded as
// stopped instead of launched.
func (d *Dispatcher) admitInterruptibly(req StartRequest) (*Reservation, syscall.Signal, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got atomic.Int32
	done := make(chan struct{})
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case s := <-req.Signals:
			if ss, ok := s.(syscall.Signal); ok {
				got.Store(int32(ss))
			} else {
				got.Store(int32(syscall.SIGTERM))
			}
			cancel()
		case <-done:
		}
	}()
	res, err := d.Admit(ctx, req.AdmitRequest)
	close(done)
	<-watcherDone
	return res, syscall.Signal(got.Load()), err
}

type supervisor struct {
	d    *Dispatcher
	req  StartRequest
	res  *Reservation
	rec  *runstore.Record
	warn func(string)
	cmd  *exec.Cmd
	pgid int
	// ownsTTY: the command's group is its terminal's foreground group.
	ownsTTY bool
	done    bool // the record is final
	// ready, for a detached supervisor, tells the parent the run's state.
	ready *os.File
}

// signalReady tells a detached supervisor's parent how the launch went.
func (s *supervisor) signalReady(line string) {
	if s.ready == nil {
		return
	}
	_, _ = s.ready.WriteString(line + "\n")
	_ = s.ready.Close()
	s.ready = nil
}

func (s *supervisor) run() (int, runstore.RunID, error) {
	st := s.d.Store
	id := s.rec.RunID
	logf, err := os.OpenFile(st.LogPath(id), os.O_WRONLY|os.O_CREATE|os.O_APPEND, runstore.FilePerm)
	if err != nil {
		return s.internalFailure(fmt.Errorf("open the run's log: %w", err))
	}
	defer logf.Close()
	out, err := newOutput(s.req.Stdout, s.req.Stderr, logf)
	if err != nil {
		return s.internalFailure(err)
	}

	cmd := exec.Command(s.rec.Command[0], s.rec.Command[1:]...)
	cmd.Dir = s.rec.Dir
	cmd.Stdin = s.req.Stdin
	cmd.Stdout = out.child[0]
	cmd.Stderr = out.child[1]
	cmd.Env = append(append([]string{}, s.req.Env...),
		"CREW_RUN_ID="+string(id), "CREW_TASK="+s.rec.Task, "CREW_ROOT="+st.Root)
	// fd 3 of the command is the owner lock: the slot stays held while any
	// process of the run lives, even if this supervisor dies.
	cmd.ExtraFiles = []*os.File{s.res.Owner.File()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if fd, ok := foregroundTTY(s.req.Stdin); ok {
		cmd.SysProcAttr.Foreground = true
		cmd.SysProcAttr.Ctty = fd
		s.ownsTTY = true
		defer reclaimTTY(fd)
	}
	if err := cmd.Start(); err != nil {
		out.closeAll()
		return s.launchFailure(err)
	}
	out.started()
	s.cmd = cmd
	s.pgid = cmd.Process.Pid
	failpoint.Hit("launched")

	now := s.d.now()
	s.rec.State = runstore.Running
	s.rec.StartedAt = &now
	s.rec.TaskPID = cmd.Process.Pid
	s.rec.PGID = s.pgid
	s.rec.AddEvent(now, "command started: pid %d, supervisor pid %d", s.rec.TaskPID, s.rec.SupervisorPID)
	if err := st.UpdateActive(s.rec); err != nil {
		return s.internalFailure(err)
	}
	s.signalReady("running")

	ws, stop := s.wait()
	out.drain()
	failpoint.Hit("exited")
	code := exitCode(ws)
	s.describeExit(ws, stop)
	if err := out.logErr(); err != nil {
		s.warn(fmt.Sprintf("run %s: the log %s is incomplete: %v", id, st.LogPath(id), err))
	}
	if err := s.finish(); err != nil {
		return 125, id, &InternalError{RunID: id, Err: err}
	}
	return code, id, nil
}

// finalEvent is the last line of a run's history.
func finalEvent(rec *runstore.Record) string {
	if rec.Reason == "" {
		return string(rec.State)
	}
	return string(rec.State) + ": " + rec.Reason
}

// stopRecord remembers a stop request and how it was carried out.
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
		case sig := <-s.req.Signals:
			ss, ok := sig.(syscall.Signal)
			if !ok {
				ss = syscall.SIGTERM
			}
			if stop == nil {
				stop = &stopRecord{sig: ss}
				grace = time.After(s.req.Grace)
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

func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// describeExit fills in the terminal state from how the command ended.
func (s *supervisor) describeExit(ws syscall.WaitStatus, stop *stopRecord) {
	now := s.d.now()
	code := exitCode(ws)
	s.rec.FinishedAt = &now
	s.rec.ExitCode = &code
	how := fmt.Sprintf("command exited with status %d", code)
	if ws.Signaled() {
		how = "command was killed by " + signalName(ws.Signal())
	}
	req := s.d.readStopRequest(s.rec.RunID)
	switch {
	case stop == nil && req != nil:
		s.rec.State = runstore.Stopped
		s.rec.Signal = req.Signal
		s.rec.Reason = fmt.Sprintf("%s; %s", req.describe(s.pgid), how)
	case stop != nil:
		s.rec.State = runstore.Stopped
		s.rec.Signal = signalName(stop.sig)
		s.rec.Reason = fmt.Sprintf("crew received %s and forwarded it to process group %d; %s",
			signalName(stop.sig), s.pgid, how)
		if stop.killed {
			s.rec.Reason += fmt.Sprintf(" (sent SIGKILL after the %s grace period)", s.req.Grace)
		}
	case s.ownsTTY && ws.Signaled() && (ws.Signal() == syscall.SIGINT || ws.Signal() == syscall.SIGQUIT):
		// The command owned the terminal, so Ctrl-C (or Ctrl-\) went to it
		// directly rather than through crew.
		s.rec.State = runstore.Stopped
		s.rec.Signal = signalName(ws.Signal())
		s.rec.Reason = fmt.Sprintf("interrupted from the terminal (%s); %s", signalName(ws.Signal()), how)
	case code == 0:
		s.rec.State = runstore.Succeeded
		s.rec.Reason = ""
	default:
		s.rec.State = runstore.Failed
		if ws.Signaled() {
			s.rec.Signal = signalName(ws.Signal())
		}
		s.rec.Reason = how
	}
}

// finish makes the final record durable among the finished runs, takes
// the run out of the active set, and only then lets go of the locks — the
// owner lock last.
func (s *supervisor) finish() error {
	st := s.d.Store
	s.rec.AddEvent(*s.rec.FinishedAt, "%s", finalEvent(s.rec))
	if err := st.WriteDone(s.rec); err != nil {
		return err
	}
	s.done = true
	failpoint.Hit("finalized")
	if err := st.RemoveActive(s.rec.RunID); err != nil {
		return err
	}
	_ = os.Remove(st.StopRequestPath(s.rec.RunID))
	if err := s.res.Supervisor.RemoveAndRelease(); err != nil {
		return err
	}
	if err := s.res.Owner.RemoveAndRelease(); err != nil {
		return err
	}
	// The slot is free: wake the waiter it belongs to.
	s.d.RingWaiters()
	return nil
}

// launchFailure records a command that could not be started.
func (s *supervisor) launchFailure(startErr error) (int, runstore.RunID, error) {
	code, reason := 126, fmt.Sprintf("cannot run %s: %v", s.rec.Command[0], startErr)
	switch {
	case errors.Is(startErr, exec.ErrNotFound), errors.Is(startErr, fs.ErrNotExist):
		code, reason = 127, fmt.Sprintf("command not found: %s", s.rec.Command[0])
	case errors.Is(startErr, fs.ErrPermission):
		reason = fmt.Sprintf("command not executable: %s: permission denied", s.rec.Command[0])
	case errors.Is(startErr, syscall.ENOEXEC):
		reason = fmt.Sprintf("command not executable: %s: not a binary or script the system can run", s.rec.Command[0])
	}
	now := s.d.now()
	s.rec.State = runstore.Failed
	s.rec.FinishedAt = &now
	s.rec.ExitCode = &code
	s.rec.Reason = reason
	if err := s.finish(); err != nil {
		return 125, s.rec.RunID, &InternalError{RunID: s.rec.RunID, Err: err}
	}
	return code, s.rec.RunID, &LaunchError{RunID: s.rec.RunID, Code: code, Reason: reason}
}

// stopBeforeLaunch records a run that was told to stop after it was
// admitted but before its command started.
func (s *supervisor) stopBeforeLaunch(sig syscall.Signal) (int, runstore.RunID, error) {
	now := s.d.now()
	code := 128 + int(sig)
	s.rec.State = runstore.Stopped
	s.rec.FinishedAt = &now
	s.rec.Signal = signalName(sig)
	s.rec.Reason = fmt.Sprintf("crew received %s before the command started; it was never run", signalName(sig))
	if err := s.finish(); err != nil {
		return 125, s.rec.RunID, &InternalError{RunID: s.rec.RunID, Err: err}
	}
	return code, s.rec.RunID, &SignalledError{Signal: sig, RunID: s.rec.RunID}
}

// internalFailure ends a run because crew itself failed: the command (if
// it started) is killed first, so the record never calls a live run
// finished, then the run is recorded as failed.
func (s *supervisor) internalFailure(cause error) (int, runstore.RunID, error) {
	id := s.rec.RunID
	if s.cmd != nil && s.cmd.ProcessState == nil {
		_ = syscall.Kill(-s.pgid, syscall.SIGKILL)
		_ = s.cmd.Wait()
	}
	if !s.done {
		now := s.d.now()
		code := 125
		s.rec.State = runstore.Failed
		s.rec.FinishedAt = &now
		s.rec.ExitCode = &code
		s.rec.Reason = "crew internal error: " + cause.Error()
		if err := s.finish(); err != nil {
			s.warn(fmt.Sprintf("run %s: could not record the failure (%v); `crew recover` will finalize it", id, err))
		}
	}
	return 125, id, &InternalError{RunID: id, Err: cause}
}

// recoverPanic turns a panic after admission into a recorded failure and
// exit 125 instead of a crash that leaves the slot to recovery.
func (s *supervisor) recoverPanic(code *int, runID *runstore.RunID, err *error) {
	if p := recover(); p != nil {
		*code, *runID, *err = s.internalFailure(fmt.Errorf("panic: %v", p))
	}
}
