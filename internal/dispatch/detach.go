package dispatch

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/runstore"
)

// SuperviseCommand is the hidden crew subcommand a detached run's
// supervisor runs as.
const SuperviseCommand = "__supervise"

// Descriptors a detached supervisor inherits, after stdin, stdout, stderr.
const (
	fdOwner      = 3
	fdSupervisor = 4
	fdReady      = 5
)

// detach hands a reserved run to a supervisor process of its own, in its
// own session so that it survives the terminal, and returns once the run's
// record says running (or the command could not start). The child inherits
// the open file descriptions of both locks, so they are held by both
// processes until this one exits: at no instant is the slot free.
func (d *Dispatcher) detach(req StartRequest, res *Reservation) (int, runstore.RunID, error) {
	id := res.Rec.RunID
	exe, err := os.Executable()
	if err != nil {
		return d.abandon(res, fmt.Errorf("find crew's own executable: %w", err))
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return d.abandon(res, fmt.Errorf("create the handover pipe: %w", err))
	}
	defer readyR.Close()
	cmd := exec.Command(exe, SuperviseCommand, "--root", d.Store.Root, "--grace", req.Grace.String(), string(id))
	cmd.Env = req.Env
	cmd.Dir = res.Rec.Dir
	cmd.ExtraFiles = []*os.File{res.Owner.File(), res.Supervisor.File(), readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		readyW.Close()
		return d.abandon(res, fmt.Errorf("start the detached supervisor: %w", err))
	}
	readyW.Close()
	failpoint.Hit("detach-handover")
	// The child is not ours to wait for; it outlives us.
	_ = cmd.Process.Release()

	line, _ := bufio.NewReader(readyR).ReadString('\n')
	// Our copies of the locks go; the supervisor's stay.
	_ = res.Owner.Release()
	_ = res.Supervisor.Release()
	line = strings.TrimSpace(line)
	switch {
	case line == "running":
		return 0, id, nil
	case strings.HasPrefix(line, "exit "):
		codeStr, reason, _ := strings.Cut(strings.TrimPrefix(line, "exit "), " ")
		code, _ := strconv.Atoi(codeStr)
		return code, id, &LaunchError{RunID: id, Code: code, Reason: reason}
	}
	// The supervisor died before the command ran: say what the record says.
	rec, err := d.Store.ReadRun(id)
	if err == nil && !rec.State.Active() {
		return 125, id, &InternalError{RunID: id, Err: fmt.Errorf("detached supervisor ended the run as %s: %s", rec.State, rec.Reason)}
	}
	return 125, id, &InternalError{RunID: id, Err: errors.New("detached supervisor exited before the command started; `crew recover` will finalize the run")}
}

// abandon records a reserved run that could not be handed over as failed.
func (d *Dispatcher) abandon(res *Reservation, cause error) (int, runstore.RunID, error) {
	s := &supervisor{d: d, res: res, rec: res.Rec, warn: func(string) {}}
	return s.internalFailure(cause)
}

// SuperviseDetached is the detached supervisor's side: it adopts the
// inherited locks, launches the command with output to the run's log only
// and stdin from /dev/null, tells the parent when the record says running,
// and supervises the run to its end.
func (d *Dispatcher) SuperviseDetached(id runstore.RunID, grace time.Duration, signals <-chan os.Signal) (int, error) {
	st := d.Store
	ready := os.NewFile(fdReady, "ready")
	owner, err := lockfs.AdoptOwner(os.NewFile(fdOwner, "owner"), st.OwnerLockPath(id))
	if err != nil {
		return 125, err
	}
	sup, err := lockfs.AdoptOwner(os.NewFile(fdSupervisor, "supervisor"), st.SupervisorLockPath(id))
	if err != nil {
		return 125, err
	}
	rec, err := st.ReadRecord(st.ActivePath(id))
	if err != nil {
		return 125, err
	}
	if rec.State != runstore.Provisioning {
		return 125, fmt.Errorf("run %s is %s, not provisioning", id, rec.State)
	}
	rec.SupervisorPID = os.Getpid()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 125, err
	}
	defer devnull.Close()
	req := StartRequest{Grace: grace, Stdin: devnull, Env: os.Environ(), Signals: signals}
	s := &supervisor{d: d, req: req, res: &Reservation{Rec: rec, Owner: owner, Supervisor: sup}, rec: rec,
		warn: func(string) {}, ready: ready}
	code, _, err := s.guarded()
	s.signalReady("exit " + strconv.Itoa(code) + " " + errText(err))
	return code, err
}

func errText(err error) string {
	if err == nil {
		return "supervisor ended"
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}
