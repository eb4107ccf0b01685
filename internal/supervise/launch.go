package supervise

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strings"
	"syscall"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// launch starts the command in a process group of its own, with the
// run's owner lock as fd 3 (so the slot stays held while any process of
// the run lives, even if this supervisor dies) and, on a terminal, as the
// terminal's foreground group.
func (s *supervisor) launch(out *output) error {
	rec, claim := s.rec, s.Run.Claim()
	env := append(WithoutCrewVars(s.Env),
		"CREW_RUN_ID="+string(rec.RunID), "CREW_TASK="+rec.Task, claim.Env())
	sys, stdin := &syscall.SysProcAttr{Setpgid: true}, s.Stdin
	if s.lg.leased() {
		if err := s.lg.awaitFresh(); err != nil {
			return err
		}
		if err := s.lg.start(sys); err != nil {
			return err
		}
		failpoint.Hit(failpoint.GuardStarted)
	} else if s.pty != nil {
		sys, stdin = s.pty.childSys(), s.pty.slave
	} else if fd, ok := foregroundTTY(s.Stdin); ok {
		sys.Foreground = true
		sys.Ctty = fd
		s.ownsTTY, s.ttyFD = true, fd
	}
	if err := failpoint.Error(failpoint.ForkExec); err != nil {
		path, lerr := exec.LookPath(rec.Command[0])
		if lerr != nil {
			path = rec.Command[0]
		}
		return &fs.PathError{Op: "fork/exec", Path: path, Err: err}
	}
	c, err := startChild(rec.Command, rec.Dir, env, stdin, out.child[0], out.child[1], claim.Files(), sys)
	if err != nil {
		if s.lg.running() && errors.Is(err, syscall.EPERM) {
			// setpgid: the guard's group is gone, the guard with it.
			err = &crewFault{fmt.Errorf("the lease guard exited before the command could join its group: %w", err)}
		}
		s.lg.stop(s.Warn, rec.RunID)
		return err
	}
	s.cmd = c
	s.pgid = c.pid
	if s.lg.running() {
		s.pgid = s.lg.g.Pgid()
		failpoint.Hit(failpoint.GuardJoined)
		return s.lg.confirm()
	}
	if s.pty != nil {
		s.pty.pgid.Store(int32(c.pid))
	}
	return nil
}

// WithoutCrewVars is env without the CREW_RUN_ID, CREW_TASK, CREW_ROOT and
// CREW_STORE of an outer run (a nested crew start): crew adds its own, and
// with two of one name a program may well see the first (getenv does), so
// a nested run's command would be told it was its parent. Every backend's
// supervisor uses it.
func WithoutCrewVars(env []string) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "CREW_RUN_ID", "CREW_TASK", "CREW_ROOT", "CREW_STORE":
		default:
			out = append(out, kv)
		}
	}
	return out
}

// launchFailure records a command that could not be started.
func (s *supervisor) launchFailure(startErr error) error {
	if what, ok := shortOf(startErr); ok {
		return s.resourceFailure(startErr, what)
	}
	name := s.rec.Command[0]
	notFound := errors.Is(startErr, exec.ErrNotFound) || errors.Is(startErr, fs.ErrNotExist)
	code, reason := vocab.ExitCannotRun, fmt.Sprintf("cannot run %s: %v", name, startErr)
	switch {
	case notFound:
		code, reason = vocab.ExitNotFound, fmt.Sprintf("command not found: %s", name)
	case errors.Is(startErr, fs.ErrPermission):
		reason = fmt.Sprintf("command not executable: %s: permission denied", name)
	case errors.Is(startErr, syscall.ENOEXEC):
		reason = fmt.Sprintf("command not executable: %s: not a binary or script the system can run", name)
	}
	s.rec.Finish(record.Failed, s.now(), &code, reason)
	if err := s.finish(); err != nil {
		return finishFailure(s.rec.RunID, err)
	}
	return &vocab.LaunchError{RunID: s.rec.RunID, NotFound: notFound, Reason: reason}
}
