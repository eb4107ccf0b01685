// Package supervise runs an admitted run's command and sees it to its
// final record: launch (with the owner lock inherited as fd 3), output to
// the terminal and the log, the terminal's foreground, stop signals and the
// grace period, and the run's final state. It also hands a run to a
// detached supervisor process (--detach).
package supervise

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// Request is one admitted run to supervise: its provisioning record is
// durable and this process holds its locks.
type Request struct {
	// Run is the admitted run, as its store hands it over.
	Run backend.Run
	// Logs is this host's state root, where the run's log is kept.
	Logs *runstore.Store
	Rec  *record.Run
	// Grace is how long the command's process group has between a
	// forwarded stop signal and SIGKILL.
	Grace time.Duration
	// Stdin, Stdout and Stderr are the command's streams; Stdout and
	// Stderr are also copied to the run's log.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Env is the command's environment before crew adds CREW_RUN_ID,
	// CREW_TASK and CREW_ROOT.
	Env []string
	// Signals delivers the stop signals crew received (SIGINT, SIGTERM,
	// SIGHUP, SIGQUIT); they are forwarded to the command's process group.
	Signals <-chan os.Signal
	// Warn receives warnings for the user, as errors so that crew's own
	// line breaks (errors.Join) can be told from text in the state root;
	// Note, what crew says about the run that is no warning (a retry).
	Warn func(error)
	Note func(string)
	// Now is the clock.
	Now func() time.Time
	// Finished, if set, runs once the run is final and its slot free.
	Finished func()
	// Tag, if set, prefixes every line of the command's output on Stdout
	// and Stderr (not in the log): crew start --tag.
	Tag string
	// NoPTY keeps the command on pipes even on an interactive terminal
	// (crew start --no-pty); see ptyTerm for when it gets one.
	NoPTY bool

	// ready, for a detached supervisor, tells the parent how the launch went.
	ready *os.File
}

// supervisor is one run being supervised.
type supervisor struct {
	Request
	rec  *record.Run
	cmd  *child
	pgid int
	// ownsTTY: the command's group is its terminal's foreground group.
	ownsTTY bool
	ttyFD   int
	// pty is the command's pseudo-terminal in the current attempt, if it
	// runs on one.
	pty  *ptyTerm
	done bool // the record is final
	// logFailed: writing the log failed, and the user was told.
	logFailed bool
	// uid is the user this supervisor runs as, whose the run is: only
	// that user's and root's stop requests are carried out (rights.go).
	uid int
	// refused are the stop requests refused so far, each noted once.
	refused []refusedStop
	// lg is the run's lease and its attempt's guard, on a store of
	// leases (lease.go).
	lg guarding
	// interrupt is the signal typed at the terminal that ended the run,
	// if one did (ExitError.TerminalInterrupt).
	interrupt syscall.Signal
}

func newSupervisor(req Request) *supervisor {
	if req.Warn == nil {
		req.Warn = func(error) {}
	}
	if req.Note == nil {
		req.Note = func(string) {}
	}
	if req.Now == nil {
		req.Now = time.Now
	}
	return &supervisor{Request: req, rec: req.Rec, uid: os.Geteuid(), lg: guardingOf(req.Run)}
}

func (s *supervisor) now() time.Time { return s.Now().UTC() }

// Run launches the command and supervises it to its final record. It
// returns nil when the command exited 0, an *ExitError with the command's
// exit status otherwise, a *LaunchError if it could not be started, and an
// *InternalError if crew itself failed (the run is then recorded failed).
func Run(req Request) (err error) {
	s := newSupervisor(req)
	defer s.recoverPanic(&err)
	return s.run()
}

func (s *supervisor) run() error {
	id := s.rec.RunID
	if req := s.Run.ReadStopRequest(); req != nil && s.mayAct(req) {
		return s.stoppedBeforeLaunch(req)
	}
	logw, planted, err := s.createLog()
	if err != nil {
		return s.internalFailure(err)
	}
	if planted != "" {
		// Told to the user, and kept in the run's history (a detached
		// run has no one to tell).
		s.Warn(errors.New(planted))
		s.rec.AddEvent(s.now(), "%s", planted)
	}
	defer logw.Close()
	defer s.reclaimTTY()
	for n := 1; ; n++ {
		end, err := s.attempt(n, logw)
		if err != nil {
			return err
		}
		if !s.retriesAfter(end, n) {
			s.describeExit(end)
			break
		}
		stopped, err := s.between(n, end, logw)
		if err != nil {
			return err
		}
		if stopped {
			break // the record says how
		}
	}
	if err := logw.Close(); err != nil && !s.logFailed {
		s.Warn(fmt.Errorf("run %s: the log %s could not be put together (%w); crew logs still shows it whole", id, s.Logs.Logs().LogPath(id), err))
	}
	code := *s.rec.ExitCode // the record may be left running to the processes the command left
	if err := s.finish(); err != nil {
		return finishFailure(id, err)
	}
	if err := s.lg.ended(); err != nil {
		s.Warn(err)
	}
	if code != 0 {
		return &vocab.ExitError{RunID: id, Code: code, TerminalInterrupt: s.interrupt}
	}
	return nil
}

// attempt runs the command once (attempt n) and returns how it ended; an
// error if it could not be started or crew failed (the run is then final).
func (s *supervisor) attempt(n int, logw io.Writer) (ending, error) {
	out, err := s.newOutput(logw)
	if err != nil {
		return ending{}, s.internalFailure(err)
	}
	// crew's terminal goes raw before the command can write to its own,
	// and gets its mode back however this ends, a panic included.
	defer s.pty.release()
	defer s.pty.close()
	s.pty.started()
	if err := s.launch(out); err != nil {
		out.closeAll()
		var fault *crewFault
		if errors.As(err, &fault) {
			return ending{}, s.internalFailure(fault.err)
		}
		return ending{}, s.launchFailure(err)
	}
	out.started()
	failpoint.Hit(failpoint.Launched)
	if err := s.recordRunning(n); err != nil {
		return ending{}, s.internalFailure(err)
	}
	s.signalReady("running")

	ws, stop := s.wait()
	s.lg.overdue(ws)
	s.lg.stop(s.Warn, s.rec.RunID)
	s.pty.close() // keystrokes from now on are the shell's
	out.drain()
	s.pty.release() // once the command's output is all out, raw as written
	failpoint.Hit(failpoint.Exited)
	s.reclaimTTY()
	end := s.endingOf(ws, stop)
	out.report(s.Warn, string(s.rec.RunID), s.Logs.Logs().LogPath(s.rec.RunID))
	s.logFailed = s.logFailed || out.logErr() != nil
	return end, nil
}

// newOutput makes the command's stdout and stderr for an attempt: a
// pseudo-terminal on an interactive terminal, else pipes.
func (s *supervisor) newOutput(logw io.Writer) (*output, error) {
	if s.pty = s.ptyFor(); s.pty != nil && !s.lg.leased() {
		return newTerminalOutput(s.Stdout, logw, s.pty), nil
	}
	return newOutput(s.Stdout, s.Stderr, logw, s.Tag)
}

// createLog opens the run's log: capped if its record says so. Closing it
// twice is harmless.
func (s *supervisor) createLog() (w *runLog, planted string, err error) {
	if s.rec.LogMax > 0 {
		lw, planted, err := s.Logs.Logs().CreateCappedLog(s.rec.RunID, s.rec.LogMax)
		if err != nil {
			return nil, "", err
		}
		return &runLog{c: lw, w: lw}, planted, nil
	}
	f, planted, err := s.Logs.Logs().CreateLog(s.rec.RunID)
	if err != nil {
		return nil, "", err
	}
	return &runLog{c: f, w: f}, planted, nil
}

// runLog is the run's log as the supervisor writes it: closed the first
// time only, and aware of whether its output so far ends mid-line, so that
// crew's own lines in it start on a line of their own. The command's
// stdout and stderr are copied into it concurrently.
type runLog struct {
	w    io.Writer
	c    io.Closer
	once sync.Once
	err  error

	mu      sync.Mutex
	midLine bool
}

func (l *runLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(p)
	if n > 0 {
		l.midLine = p[n-1] != '\n'
	}
	return n, err
}

// note writes one line of crew's own to the log, e.g. where a retry begins:
// "[crew: attempt 2 of 3 after exit 1]". The log is best-effort output; a
// failed write shows up where the command's next output fails too.
func (l *runLog) note(line string) {
	l.mu.Lock()
	nl := l.midLine
	l.mu.Unlock()
	text := "[crew: " + line + "]\n"
	if nl {
		text = "\n" + text
	}
	_, _ = l.Write([]byte(text))
}

func (l *runLog) Close() error {
	l.once.Do(func() { l.err = l.c.Close() })
	return l.err
}

// recordRunning records the command's pid and process group, and with
// retries, attempt n.
func (s *supervisor) recordRunning(n int) error {
	now := s.now()
	s.rec.State = record.Running
	s.rec.TaskPID = s.cmd.pid
	s.rec.PGID = s.pgid
	if s.rec.Retries > 0 {
		s.rec.Attempts = append(s.rec.Attempts, record.Attempt{Number: n, StartedAt: now, PID: s.cmd.pid})
	}
	if n > 1 {
		s.rec.AddEvent(now, "attempt %d of %d started: pid %d", n, s.rec.MaxAttempts(), s.rec.TaskPID)
		return s.Run.Update(s.rec)
	}
	s.rec.StartedAt = &now
	if s.lg.running() {
		s.rec.AddEvent(now, "command started: pid %d, supervisor pid %d, in process group %d led by its lease guard (pid %d)",
			s.rec.TaskPID, s.rec.SupervisorPID, s.pgid, s.lg.g.PID())
		return s.Run.Update(s.rec)
	}
	s.rec.AddEvent(now, "command started: pid %d, supervisor pid %d", s.rec.TaskPID, s.rec.SupervisorPID)
	return s.Run.Update(s.rec)
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
