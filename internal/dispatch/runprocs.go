package dispatch

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"

	"github.com/crew-dev/crew/internal/proc"
	"github.com/crew-dev/crew/internal/record"
)

// runProcs are a run's command processes as the kernel shows them: the
// processes that hold its owner lock, except its supervisors (which hold
// the supervisor lock too), each pinned by a pidfd. crew stop signals
// these, never a pid or group read from a record.
type runProcs struct {
	id         record.RunID
	owner, sup proc.FileID
	cmd        []*proc.Proc
	// supervisors seen holding the supervisor lock; their groups are
	// never signalled.
	supervisors []proc.Holder
	unreadable  int
	pids        []int // signalled, for the record
	groups      []int
}

// findRunProcs scans the process table for run id's processes.
func (x *stopper) findRunProcs() (*runProcs, error) {
	d, id := x.d, x.id
	procs, ok := d.procs()
	if !ok {
		return nil, fmt.Errorf("%w: the processes of a run of %s may be on another host", proc.ErrUnsupported, d.Store.Where())
	}
	owner, sup, err := procs.RunLockIDs(id)
	if err != nil {
		return nil, err
	}
	t := &runProcs{id: id, owner: owner, sup: sup}
	return t, t.rescan()
}

// rescan pins the command processes that hold the lock now and were not
// pinned before (a child forked since the last scan).
func (t *runProcs) rescan() error {
	files := []proc.FileID{t.owner}
	if t.sup != (proc.FileID{}) {
		files = append(files, t.sup)
	}
	scan, err := proc.FindHolders(files...)
	if err != nil {
		return err
	}
	t.unreadable = scan.Unreadable
	if t.sup != (proc.FileID{}) {
		t.supervisors = scan.Of(t.sup)
	}
	for _, h := range scan.Of(t.owner) {
		if t.isSupervisor(h.PID) || t.isPinned(h.PID) {
			continue
		}
		p, err := proc.Pin(h)
		if err != nil {
			continue // gone meanwhile: nothing to prove, nothing to do
		}
		t.cmd = append(t.cmd, p)
	}
	return nil
}

func (t *runProcs) isSupervisor(pid int) bool {
	return slices.ContainsFunc(t.supervisors, func(h proc.Holder) bool { return h.PID == pid })
}

func (t *runProcs) isPinned(pid int) bool {
	return slices.ContainsFunc(t.cmd, func(p *proc.Proc) bool { return p.PID() == pid })
}

// signal sends sig to every pinned process that still holds the lock and
// to its process group (so that members that closed the lock, such as a
// grandchild, get it too), then SIGCONT the same way unless sig is
// SIGKILL, so that a stopped (Ctrl-Z) group acts on it now.
func (t *runProcs) signal(sig syscall.Signal) {
	t.send(sig)
	if sig != syscall.SIGKILL {
		t.send(syscall.SIGCONT)
	}
}

// send signals each pinned process's group once, or the process alone
// where its group may not be signalled (crew's own, a supervisor's).
func (t *runProcs) send(sig syscall.Signal) {
	var avoid, done []int
	for _, s := range t.supervisors {
		avoid = append(avoid, s.PGID)
	}
	for _, p := range t.cmd {
		if pgid, err := p.Group(); err != nil || slices.Contains(done, pgid) {
			continue // gone, or its group has had the signal
		}
		pgid, err := p.SignalGroup(sig, avoid...)
		switch {
		case err == nil:
			done = append(done, pgid)
			t.groups = appendNew(t.groups, pgid)
			t.pids = appendNew(t.pids, p.PID())
		case errors.Is(err, proc.ErrGone):
		default:
			if p.Signal(sig) == nil {
				t.pids = appendNew(t.pids, p.PID())
			}
		}
	}
}

func appendNew(xs []int, x int) []int {
	if slices.Contains(xs, x) {
		return xs
	}
	return append(xs, x)
}

// holding reports whether a pinned process still holds the lock; when
// none does it looks once more for processes it has not pinned yet.
func (t *runProcs) holding() bool {
	if slices.ContainsFunc(t.cmd, (*proc.Proc).Holds) {
		return true
	}
	if t.rescan() != nil {
		return false
	}
	return slices.ContainsFunc(t.cmd, (*proc.Proc).Holds)
}

// targets describes what was signalled, for the run's record.
func (t *runProcs) targets() string {
	s := "pid " + joinInts(t.pids)
	if len(t.pids) > 1 {
		s = "pids " + joinInts(t.pids)
	}
	switch len(t.groups) {
	case 0:
		return s
	case 1:
		return s + " and process group " + joinInts(t.groups)
	}
	return s + " and process groups " + joinInts(t.groups)
}

// supervisorState says what is known of a living supervisor, for messages.
func (t *runProcs) supervisorState() string {
	if len(t.supervisors) == 0 {
		return "its supervisor is gone"
	}
	h := t.supervisors[0]
	if h.State == 'T' || h.State == 't' {
		return fmt.Sprintf("its supervisor (pid %d) is stopped (Ctrl-Z or SIGSTOP); it records the run when it is continued", h.PID)
	}
	return fmt.Sprintf("its supervisor (pid %d) is alive but did not answer", h.PID)
}

// noneProven explains why no process of the run could be signalled.
func (t *runProcs) noneProven() error {
	msg := "no process holding the run's owner lock could be found"
	if t.unreadable > 0 {
		msg += fmt.Sprintf(" (%d processes could not be inspected: another user's?)", t.unreadable)
	}
	return errors.New(msg + "; nothing was signalled")
}

func (t *runProcs) close() {
	for _, p := range t.cmd {
		p.Close()
	}
	t.cmd = nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

// holderPIDs lists the command processes that hold an orphan's slot, for
// `crew status` and `crew recover`. It only reads.
func (d *Dispatcher) holderPIDs(id record.RunID) ([]int, error) {
	procs, ok := d.procs()
	if !ok {
		return nil, fmt.Errorf("%w: the processes of a run of %s may be on another host", proc.ErrUnsupported, d.Store.Where())
	}
	owner, sup, err := procs.RunLockIDs(id)
	if err != nil {
		return nil, err
	}
	scan, err := proc.FindHolders(owner, sup)
	if err != nil {
		return nil, err
	}
	var sups, out []int
	for _, h := range scan.Of(sup) {
		sups = append(sups, h.PID)
	}
	for _, h := range scan.Of(owner) {
		if !slices.Contains(sups, h.PID) {
			out = append(out, h.PID)
		}
	}
	slices.Sort(out)
	return out, nil
}
