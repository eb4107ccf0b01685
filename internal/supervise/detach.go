package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// Command is the hidden crew subcommand a detached run's supervisor runs
// as.
const Command = "__supervise"

// Detach hands an admitted run to a supervisor process of its own (crew
// itself, as `crew __supervise`), in its own session so that it survives
// the terminal, and returns once the run's record says running (or the
// command could not start). The child inherits the open file descriptions
// of both run locks, so they are held by it from its fork on: at no
// instant is the slot free.
func Detach(req Request) error {
	id := req.Rec.RunID
	exe, err := os.Executable()
	if err != nil {
		return Abandon(req, fmt.Errorf("find crew's own executable: %w", err))
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return Abandon(req, fmt.Errorf("create the handover pipe: %w", err))
	}
	defer readyR.Close()
	h := req.Run.HandOver()
	argv := append(append([]string{exe, Command}, h.Store...), "--grace", req.Grace.String(), "--files", strconv.Itoa(len(h.Files)))
	for _, v := range h.Adopt {
		argv = append(argv, "--adopt", v)
	}
	argv = append(argv, string(id))
	// The handover pipe comes last, after the store's descriptors.
	err = ForkDetached(argv, req.Rec.Dir, req.Env, append(h.Files, readyW))
	readyW.Close()
	if err != nil {
		return Abandon(req, fmt.Errorf("start the detached supervisor: %w", err))
	}
	// The child holds both locks now (it inherited their open file
	// descriptions at its fork): ours go at once, or the supervisor would
	// take this process, still waiting for its line, for what its command
	// left holding the slot.
	req.Run.Release()
	failpoint.Hit(failpoint.DetachHandover)
	// The child is not ours to wait for: it outlives us (and, if it
	// exits first, stays a zombie only until we exit a moment later).

	line, _ := bufio.NewReader(readyR).ReadString('\n')
	return handoverResult(req.Logs, id, strings.TrimSpace(line))
}

// handoverResult turns the detached supervisor's one line into Detach's
// result.
func handoverResult(st readRun, id record.RunID, line string) error {
	switch {
	case line == "running":
		return nil
	case strings.HasPrefix(line, "launch "):
		kind, reason, _ := strings.Cut(strings.TrimPrefix(line, "launch "), " ")
		return &vocab.LaunchError{RunID: id, NotFound: kind == "notfound", Reason: reason}
	case strings.HasPrefix(line, "stopped "):
		// Stopped before the command started (crew stop found it
		// between admission and launch): as a foreground start says.
		num, by, _ := strings.Cut(strings.TrimPrefix(line, "stopped "), " ")
		if sig, err := strconv.Atoi(num); err == nil && sig > 0 {
			return &vocab.SignalledError{Signal: syscall.Signal(sig), RunID: id, By: by}
		}
	}
	// The supervisor died or failed before the command ran: say what the
	// record says.
	rec, err := st.ReadRun(id)
	if err == nil && !rec.State.Active() {
		return &vocab.InternalError{RunID: id, Err: fmt.Errorf("detached supervisor ended the run as %s: %s", rec.State, rec.Reason)}
	}
	return &vocab.InternalError{RunID: id, Err: errors.New("detached supervisor exited before the command started; `crew recover` will finalize the run")}
}

// readRun reads a run's record.
type readRun interface {
	ReadRun(id record.RunID) (*record.Run, error)
}

// Adoption is what a detached supervisor is started with.
type Adoption struct {
	Store  backend.Adopter
	Runs   backend.Runs
	Logs   *runstore.Store
	ID     record.RunID
	Values []string // the store's own (HandOver.Adopt)
	// Files is how many descriptors the store handed over, from fd 3 on;
	// the handover pipe follows them.
	Files int
}

// RunDetached is the detached supervisor's side: it adopts the run as its
// store handed it over, launches the command with output to the run's log
// only and stdin from /dev/null, tells the parent when the record says
// running, and supervises the run to its end.
func RunDetached(a Adoption, grace time.Duration, signals <-chan os.Signal, finished func()) error {
	// Inherited descriptors are not close-on-exec. The command must
	// inherit only what the store's claim gives it (launch passes it on):
	// a command that held the supervisor lock would pass for a living
	// supervisor after this process died, and the handover pipe is ours.
	files := make([]*os.File, a.Files)
	for i := range files {
		unix.CloseOnExec(3 + i)
		files[i] = os.NewFile(uintptr(3+i), fmt.Sprintf("handed-over-%d", i))
	}
	readyFD := 3 + a.Files
	unix.CloseOnExec(readyFD)
	ready := os.NewFile(uintptr(readyFD), "ready")
	run, err := a.Store.Adopt(a.ID, a.Values, files)
	if err != nil {
		return err
	}
	failpoint.Hit(failpoint.Adopted)
	rec, err := a.Runs.ReadActive(a.ID)
	if err != nil {
		return err
	}
	if rec.State != record.Provisioning {
		return fmt.Errorf("run %s is %s, not provisioning", a.ID, rec.State)
	}
	rec.SupervisorPID = os.Getpid()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	req := Request{Run: run, Logs: a.Logs, Rec: rec, Grace: grace, Stdin: devnull, Env: os.Environ(),
		Signals: signals, Finished: finished, ready: ready}
	s := newSupervisor(req)
	err = func() (err error) {
		defer s.recoverPanic(&err)
		return s.run()
	}()
	s.signalReady(readyLine(err))
	return err
}

// readyLine tells the parent why the supervisor ended before it could say
// "running".
func readyLine(err error) string {
	var launch *vocab.LaunchError
	var stopped *vocab.SignalledError
	if errors.As(err, &stopped) {
		return fmt.Sprintf("stopped %d %s", int(stopped.Signal), strings.ReplaceAll(stopped.By, "\n", " "))
	}
	if errors.As(err, &launch) {
		kind := "notexec"
		if launch.NotFound {
			kind = "notfound"
		}
		return "launch " + kind + " " + strings.ReplaceAll(launch.Reason, "\n", " ")
	}
	if err == nil {
		return "exit 0"
	}
	return "exit " + strconv.Quote(err.Error())
}
