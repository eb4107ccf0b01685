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

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// Command is the hidden crew subcommand a detached run's supervisor runs
// as.
const Command = "__supervise"

// Descriptors a detached supervisor inherits, after stdin, stdout, stderr.
const (
	fdOwner      = 3
	fdSupervisor = 4
	fdReady      = 5
)

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
	argv := []string{exe, Command, "--root", req.Store.Root(), "--grace", req.Grace.String(), string(id)}
	_, err = startChild(argv, req.Rec.Dir, req.Env, nil, nil, nil,
		[]*os.File{req.Locks.OwnerFile(), req.Locks.SupervisorFile(), readyW}, &syscall.SysProcAttr{Setsid: true})
	readyW.Close()
	if err != nil {
		return Abandon(req, fmt.Errorf("start the detached supervisor: %w", err))
	}
	// The child holds both locks now (it inherited their open file
	// descriptions at its fork): ours go at once, or the supervisor would
	// take this process, still waiting for its line, for what its command
	// left holding the slot.
	req.Locks.Release()
	failpoint.Hit(failpoint.DetachHandover)
	// The child is not ours to wait for: it outlives us (and, if it
	// exits first, stays a zombie only until we exit a moment later).

	line, _ := bufio.NewReader(readyR).ReadString('\n')
	return handoverResult(req.Store, id, strings.TrimSpace(line))
}

// handoverResult turns the detached supervisor's one line into Detach's
// result.
func handoverResult(st *runstore.Store, id record.RunID, line string) error {
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

// RunDetached is the detached supervisor's side: it adopts the inherited
// locks, launches the command with output to the run's log only and stdin
// from /dev/null, tells the parent when the record says running, and
// supervises the run to its end.
func RunDetached(st *runstore.Store, id record.RunID, grace time.Duration, signals <-chan os.Signal, finished func()) error {
	// Inherited descriptors are not close-on-exec. The command must
	// inherit the owner lock alone (launch passes it as fd 3): a command
	// that held the supervisor lock would pass for a living supervisor
	// after this process died, and the handover pipe is ours.
	for _, fd := range []int{fdOwner, fdSupervisor, fdReady} {
		unix.CloseOnExec(fd)
	}
	ready := os.NewFile(fdReady, "ready")
	locks, err := st.AdoptRunLocks(id, os.NewFile(fdOwner, "owner"), os.NewFile(fdSupervisor, "supervisor"))
	if err != nil {
		return err
	}
	rec, err := st.ReadActive(id)
	if err != nil {
		return err
	}
	if rec.State != record.Provisioning {
		return fmt.Errorf("run %s is %s, not provisioning", id, rec.State)
	}
	rec.SupervisorPID = os.Getpid()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	req := Request{Store: st, Rec: rec, Locks: locks, Grace: grace, Stdin: devnull, Env: os.Environ(),
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
