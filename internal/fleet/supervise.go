//go:build etcd

package fleet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/leaseguard"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/supervise"
	"github.com/crew-dev/crew/internal/vocab"
)

// GuardArg is the argument crew re-executes itself with to run a lease
// guard (leaseguard.Main).
const GuardArg = "__lease-guard"

// run is one admitted run being supervised.
type run struct {
	s   *starter
	rec *record.Run
	rev int64 // the revision of the run's record as this process last wrote it
	g   *leaseguard.Guard
	cmd *exec.Cmd
	out *output
	// onRunning and onLaunchFailed tell a detaching parent how the launch
	// went.
	onRunning      func()
	onLaunchFailed func(*vocab.LaunchError)

	// guardGone: the guard exited before the run ended (someone killed
	// it): the command is killed, since nothing else would stop it with
	// the lease. ending: the attempt is over and its guard told to end.
	guardGone, ending atomic.Bool
	gmu               sync.Mutex // guards g, which each attempt replaces

	// Why the command is being stopped, if it is: a signal crew received,
	// or the lease about to run out.
	stopSig   syscall.Signal
	stopReq   *record.StopRequest // the crew stop that asked, if one did
	timedOut  bool                // --timeout ran out
	leaseStop string              // the reason, when the lease made crew stop it
	killAt    time.Time
	escalated bool
}

func signalled(sig os.Signal, id record.RunID) error {
	s, _ := sig.(syscall.Signal)
	return &vocab.SignalledError{Signal: s, RunID: id}
}

// supervise launches the run's command under its lease guard, waits for
// it, and makes the record final.
func (s *starter) supervise(res *reserved) error {
	r := &run{s: s, rec: res.rec, rev: res.rev}
	return r.supervise()
}

func (r *run) supervise() error {
	s := r.s
	exe, err := os.Executable()
	if err != nil {
		return r.crewFailed(fmt.Errorf("find crew's own executable for the lease guard: %w", err))
	}
	s.lease.onRenew(func(d time.Duration) {
		if g := r.guard(); g != nil {
			if err := g.Extend(d); errors.Is(err, leaseguard.ErrGone) && !r.ending.Load() {
				r.guardGone.Store(true)
			}
		}
	})
	tag := ""
	if s.req.Tag {
		tag = r.rec.Task + "\t"
	}
	r.out, err = newOutput(r.s.f.Logs, r.rec, s.req.Stdout, s.req.Stderr, tag, s.req.Warn)
	if err != nil {
		return r.crewFailed(err)
	}
	for n := 1; ; n++ {
		ws, leaseStop, err := r.attempt(exe, n)
		if err != nil {
			r.out.finish()
			return err
		}
		e := r.endingOf(ws, leaseStop)
		if e.state != record.Failed || leaseStop != "" || n >= r.rec.MaxAttempts() {
			r.out.finish()
			return r.finish(e, leaseStop)
		}
		if stopped := r.between(n, e); stopped != nil {
			r.out.finish()
			return r.finish(*stopped, "")
		}
	}
}

// guard is the current attempt's lease guard.
func (r *run) guard() *leaseguard.Guard {
	r.gmu.Lock()
	defer r.gmu.Unlock()
	return r.g
}

// attempt runs the command once under a lease guard of its own, and
// returns how it ended.
func (r *run) attempt(exe string, n int) (syscall.WaitStatus, string, error) {
	s := r.s
	g, err := leaseguard.Start(leaseguard.Options{Exe: exe, Args: []string{GuardArg}, Deadline: s.lease.deadline(), Stderr: os.Stderr})
	if err != nil {
		return 0, "", r.crewFailed(fmt.Errorf("start the lease guard: %w", err))
	}
	r.gmu.Lock()
	r.g = g
	r.gmu.Unlock()
	r.ending.Store(false)
	r.guardGone.Store(false)
	_ = g.Extend(s.lease.deadline()) // renewals that came in while the guard started
	if err := r.launch(); err != nil {
		_ = g.End()
		return 0, "", r.launchFailed(err)
	}
	// The guard must have been alive when the command joined its group,
	// or nothing would kill the command with the lease.
	if err := g.Confirm(); err != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		_ = g.End()
		return 0, "", r.crewFailed(fmt.Errorf("the lease guard did not confirm the command's group (%v); killed the command", err))
	}
	r.recordRunning(n)
	if r.onRunning != nil {
		r.onRunning()
		r.onRunning = nil
	}
	ws, leaseStop := r.wait()
	// Whatever the command left in its group goes with it: no process
	// of the run may outlive the lease that its slot is.
	r.ending.Store(true)
	if err := g.End(); err != nil {
		s.req.Warn(fmt.Errorf("the lease guard of run %s: %w", r.rec.RunID, err))
	}
	r.out.drain()
	return ws, leaseStop, nil
}

// launch starts the command in the guard's process group.
func (r *run) launch() error {
	rec, req := r.rec, r.s.req
	c := exec.Command(rec.Command[0], rec.Command[1:]...)
	c.Dir = rec.Dir
	c.Env = append(supervise.WithoutCrewVars(req.Env),
		"CREW_RUN_ID="+string(rec.RunID), "CREW_TASK="+rec.Task, "CREW_STORE="+r.s.f.Loc.URL)
	if err := r.out.attach(); err != nil {
		return err
	}
	c.Stdin, c.Stdout, c.Stderr = req.Stdin, r.out.child[0], r.out.child[1]
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: r.g.Pgid()}
	err := c.Start()
	r.out.closeChild()
	if err != nil {
		r.out.drain()
		return err
	}
	r.cmd = c
	return nil
}

// write puts the run's record, fenced by the revision this process last
// wrote: a recoverer that finalized the run meanwhile (its lease expired)
// is never overwritten.
func (r *run) write(ops ...clientv3.Op) error {
	b, err := r.rec.Encode()
	if err != nil {
		return err
	}
	ctx, cancel := r.s.f.ctx()
	defer cancel()
	key := r.s.f.k.active(r.rec.RunID)
	resp, err := r.s.f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", r.rev)).
		Then(append([]clientv3.Op{clientv3.OpPut(key, string(b))}, ops...)...).Commit()
	if err != nil {
		// The answer was lost, not necessarily the write: if the record
		// is what this process wrote, it went in.
		if rev, ok := r.s.f.holds(key, b); ok {
			r.rev = rev
			return nil
		}
		return r.s.f.wrap("record run "+string(r.rec.RunID), err)
	}
	if !resp.Succeeded {
		return errFenced
	}
	r.rev = resp.Header.Revision
	return nil
}

// recordRunning records that the command started. If etcd does not take
// it, the command runs on: the final record says what happened.
func (r *run) recordRunning(n int) {
	now := r.s.f.now()
	r.rec.State = record.Running
	r.rec.TaskPID = r.cmd.Process.Pid
	r.rec.PGID = r.g.Pgid()
	if r.rec.Retries > 0 {
		r.rec.Attempts = append(r.rec.Attempts, record.Attempt{Number: n, StartedAt: now, PID: r.rec.TaskPID})
	}
	if n == 1 {
		r.rec.StartedAt = &now
		r.rec.AddEvent(now, "started: pid %d in process group %d (led by its lease guard, pid %d)", r.rec.TaskPID, r.rec.PGID, r.g.PID())
	} else {
		r.rec.AddEvent(now, "attempt %d of %d started: pid %d in process group %d", n, r.rec.MaxAttempts(), r.rec.TaskPID, r.rec.PGID)
	}
	if err := r.write(); err != nil {
		r.s.req.Warn(fmt.Errorf("could not record that run %s started (%w); it runs on", r.rec.RunID, err))
	}
}

// wait waits for the command while forwarding stop signals and watching
// the lease: a lease about to run out stops the command (SIGTERM, then
// SIGKILL) before it can expire, by this host's monotonic clock.
func (r *run) wait() (syscall.WaitStatus, string) {
	exited := make(chan struct{})
	go func() {
		_ = r.cmd.Wait()
		close(exited)
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stops := r.s.f.stopWatch(sctx, r.rec.RunID)
	var timeout <-chan time.Time
	if d := time.Duration(r.rec.Timeout); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	grace := r.s.req.Grace
	lease := r.s.lease
	// The command gets a SIGTERM this long before the lease's deadline,
	// and SIGKILL at it (the guard kills the group then too).
	lead := min(grace, lease.ttl/4)
	for {
		select {
		case <-exited:
			ws, _ := r.cmd.ProcessState.Sys().(syscall.WaitStatus)
			if r.leaseStop == "" && ws.Signaled() && ws.Signal() == syscall.SIGKILL && leaseguard.Monotonic() >= lease.deadline() {
				// This process was frozen past the deadline (SIGSTOP, a
				// stalled machine), and the guard did its work.
				r.leaseStop = fmt.Sprintf("no renewal of the lease for %s (this crew process was frozen or cut off from etcd); "+
					"the lease guard killed the command before its lease of %s could expire",
					lease.sinceContact().Round(100*time.Millisecond), lease.ttl)
			}
			return ws, r.leaseStop
		case sig := <-r.s.req.Signals:
			if s, ok := sig.(syscall.Signal); ok {
				r.stop(s, grace)
			}
		case <-timeout:
			if r.stopSig == 0 {
				r.timedOut = true
				r.stop(syscall.SIGTERM, grace)
			}
		case req := <-stops:
			if r.stopReq == nil && r.stopSig == 0 {
				r.stopReq = req
				r.stop(syscall.Signal(req.Signo), req.GraceOr(grace))
			}
		case <-tick.C:
		}
		now := leaseguard.Monotonic()
		deadline := lease.deadline()
		switch {
		case r.leaseStop == "" && r.guardGone.Load():
			r.leaseStop = fmt.Sprintf("the run's lease guard (pid %d) exited before the command; killed the command, which nothing would stop with the lease", r.g.PID())
			_ = r.cmd.Process.Kill()
		case r.leaseStop == "" && (now >= deadline-lead || lease.lost()):
			r.leaseStop = fmt.Sprintf("lost contact with etcd for %s; stopped the command before its lease of %s could expire",
				lease.sinceContact().Round(100*time.Millisecond), lease.ttl)
			if lease.lost() {
				r.leaseStop = fmt.Sprintf("etcd says the run's lease of %s expired (no renewal for %s); stopped the command",
					lease.ttl, lease.sinceContact().Round(100*time.Millisecond))
			}
			r.stop(syscall.SIGTERM, max(0, time.Duration(deadline-now)))
		case r.leaseStop != "" && now >= deadline:
			r.kill()
		}
		if r.stopSig != 0 && !r.escalated && time.Now().After(r.killAt) {
			r.kill()
			if r.stopReq != nil {
				r.stopReq.Killed = true
			}
		}
	}
}

// stop sends sig to the command's group (SIGCONT too, so that a stopped
// group hears it) and SIGKILL after grace.
func (r *run) stop(sig syscall.Signal, grace time.Duration) {
	if r.stopSig == 0 {
		r.stopSig = sig
		r.killAt = time.Now().Add(grace)
	}
	r.signalGroup(sig)
	r.signalGroup(syscall.SIGCONT)
}

func (r *run) kill() {
	r.escalated = true
	r.signalGroup(syscall.SIGKILL)
}

// signalGroup signals the run's process group, which the guard leads:
// only while the guard is unreaped is that group provably the run's.
func (r *run) signalGroup(sig syscall.Signal) {
	if err := r.g.Signal(sig); errors.Is(err, leaseguard.ErrGone) {
		_ = r.cmd.Process.Signal(sig) // the command itself, through its pidfd
	}
}

// ending is how one attempt ended.
type ending struct {
	state    record.State
	code     int
	signal   string
	reason   string
	timedOut bool
}

// endingOf says how the attempt that exited with ws ended.
func (r *run) endingOf(ws syscall.WaitStatus, leaseStop string) ending {
	e := ending{state: record.Succeeded}
	switch {
	case ws.Signaled():
		e.code, e.signal = 128+int(ws.Signal()), vocab.SignalName(ws.Signal())
		e.state, e.reason = record.Failed, "killed by "+e.signal
		if r.stopSig != 0 && leaseStop == "" && !r.timedOut {
			e.state, e.reason = record.Stopped, "stopped: crew received "+vocab.SignalName(r.stopSig)
		}
	default:
		e.code = ws.ExitStatus()
		if e.code != 0 {
			e.state, e.reason = record.Failed, fmt.Sprintf("exited with status %d", e.code)
			if r.stopSig != 0 && leaseStop == "" && !r.timedOut {
				e.state, e.reason = record.Stopped, fmt.Sprintf("stopped: crew received %s; exited with status %d", vocab.SignalName(r.stopSig), e.code)
			}
		}
	}
	if r.timedOut && leaseStop == "" {
		e.code, e.state, e.timedOut = 124, record.Failed, true
		e.reason = fmt.Sprintf("timed out after %s: crew sent SIGTERM to process group %d", duration.Format(time.Duration(r.rec.Timeout)), r.g.Pgid())
	}
	if r.stopReq != nil && leaseStop == "" && e.code != 0 {
		e.state, e.reason = record.Stopped, r.stopReq.Describe(r.g.Pgid())
	}
	if leaseStop != "" && e.code != 0 {
		// The lease, not the command, ended the run.
		e.state, e.reason = record.Failed, leaseStop
	}
	return e
}

// endAttempt records how the latest attempt ended, in a run with retries.
func (r *run) endAttempt(e ending) {
	a := r.rec.Attempt()
	if a == nil || a.EndedAt != nil {
		return
	}
	now, code := r.s.f.now(), e.code
	a.EndedAt, a.ExitCode, a.Signal, a.TimedOut, a.Reason = &now, &code, e.signal, e.timedOut, e.reason
}

// between ends failed attempt n and waits --retry-delay before the next:
// the run keeps its slot (its lease) all along. A stop meanwhile (crew
// stop, a signal crew received) ends the run as stopped: that ending is
// returned.
func (r *run) between(n int, e ending) *ending {
	delay := time.Duration(r.rec.RetryDelay)
	r.endAttempt(e)
	r.rec.TaskPID, r.rec.PGID = 0, 0
	r.rec.AddEvent(r.s.f.now(), "attempt %d of %d: %s; next attempt in %s", n, r.rec.MaxAttempts(), e.reason, duration.Format(delay))
	if err := r.write(); err != nil {
		r.s.req.Warn(fmt.Errorf("could not record attempt %d of run %s (%w); it goes on", n, r.rec.RunID, err))
	}
	after := fmt.Sprintf("exit %d", e.code)
	switch {
	case e.timedOut:
		after = fmt.Sprintf("timing out (%s)", duration.Format(time.Duration(r.rec.Timeout)))
	case e.signal != "":
		after = e.signal
	}
	line := fmt.Sprintf("attempt %d of %d after %s", n+1, r.rec.MaxAttempts(), after)
	if delay > 0 {
		line += ", in " + duration.Format(delay)
	}
	r.s.req.Note(line)
	r.stopSig, r.stopReq, r.timedOut, r.escalated = 0, nil, false, false
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stops := r.s.f.stopWatch(ctx, r.rec.RunID)
	t := time.NewTimer(delay)
	defer t.Stop()
	how := fmt.Sprintf("while waiting to retry (attempt %d of %d: %s); no command was running", n, r.rec.MaxAttempts(), e.reason)
	select {
	case <-t.C:
		r.out.note(fmt.Sprintf("crew: attempt %d of %d\n", n+1, r.rec.MaxAttempts()))
		return nil
	case sig := <-r.s.req.Signals:
		s, _ := sig.(syscall.Signal)
		return &ending{state: record.Stopped, code: 128 + int(s), signal: vocab.SignalName(s),
			reason: fmt.Sprintf("crew received %s %s", vocab.SignalName(s), how)}
	case req := <-stops:
		s := syscall.Signal(req.Signo)
		return &ending{state: record.Stopped, code: 128 + int(s), signal: vocab.SignalName(s),
			reason: fmt.Sprintf("stopped by %s %s", req.Who(), how)}
	case <-r.s.lease.expired:
		return &ending{state: record.Failed, code: 125, reason: fmt.Sprintf("the run's lease expired while waiting to retry (attempt %d of %d: %s)", n, r.rec.MaxAttempts(), e.reason)}
	}
}

// finish makes the record final and frees the slot: the final record is
// in etcd before the lease (the owner key) is revoked.
func (r *run) finish(e ending, leaseStop string) error {
	r.endAttempt(e)
	r.rec.Signal, r.rec.TimedOut = e.signal, e.timedOut
	code := e.code
	r.rec.Finish(e.state, r.s.f.now(), &code, e.reason)
	if err := r.writeFinal(); err != nil {
		return err
	}
	r.s.f.pruneLazily()
	if leaseStop != "" {
		r.s.req.Warn(errors.New(leaseStop))
	}
	if code != 0 {
		return &vocab.ExitError{RunID: r.rec.RunID, Code: code}
	}
	return nil
}

// finalWriteFor bounds how long a supervisor that cannot reach etcd keeps
// its run's outcome waiting for it; its slot is free either way (the
// lease), and recovery records the run as interrupted without it.
const finalWriteFor = time.Minute

// writeFinal moves the record to the finished runs, retrying while etcd
// does not answer. If a recoverer finalized the run meanwhile (the lease
// expired), the outcome this process knows replaces its "exit status
// unknown", fenced by that record's revision.
func (r *run) writeFinal() error {
	give := time.Now().Add(finalWriteFor)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		err := r.moveToDone()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errFenced):
			return r.replaceInterrupted()
		case time.Now().After(give):
			return fmt.Errorf("run %s ended (%s) but etcd did not take its final record for %s: %w; "+
				"`crew recover` will record it as interrupted", r.rec.RunID, r.rec.Reason, finalWriteFor, err)
		}
		time.Sleep(delay)
	}
}

// moveToDone writes the final record to runs/done and removes the active
// one, fenced by the active record's revision.
func (r *run) moveToDone() error {
	f := r.s.f
	b, err := r.rec.Encode()
	if err != nil {
		return err
	}
	ctx, cancel := f.ctx()
	defer cancel()
	key := f.k.active(r.rec.RunID)
	resp, err := f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", r.rev)).
		Then(append(f.finalOps(r.rec, b), clientv3.OpDelete(key), clientv3.OpDelete(f.k.stop(r.rec.RunID)))...).Commit()
	if err != nil {
		return f.wrap("finalize run "+string(r.rec.RunID), err)
	}
	if !resp.Succeeded {
		if rev, ok := r.ownRevision(); ok && rev != r.rev {
			// A write of this process's whose answer was lost went in.
			r.rev = rev
			return r.moveToDone()
		}
		return errFenced
	}
	return nil
}

// ownRevision is the revision of the run's active record if it is still
// this supervisor's own (an active record of this process on this host).
func (r *run) ownRevision() (int64, bool) {
	f := r.s.f
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.active(r.rec.RunID))
	if err != nil || len(resp.Kvs) == 0 {
		return 0, false
	}
	rec, err := decodeRun(resp.Kvs[0].Value)
	if err != nil || rec.SupervisorPID != r.rec.SupervisorPID || rec.Host != r.rec.Host || !rec.State.Active() {
		return 0, false
	}
	return resp.Kvs[0].ModRevision, true
}

// replaceInterrupted: the run was finalized by someone else because its
// lease expired. Put what this process knows in place of "exit status
// unknown", unless the record there says more than that.
func (r *run) replaceInterrupted() error {
	f := r.s.f
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.done(r.rec.RunID))
	if err != nil {
		return f.wrap("read run "+string(r.rec.RunID), err)
	}
	if len(resp.Kvs) == 0 {
		return fmt.Errorf("run %s: its record was removed while it ran; its outcome (%s) is not recorded", r.rec.RunID, r.rec.Reason)
	}
	kv := resp.Kvs[0]
	theirs, err := decodeRun(kv.Value)
	if err != nil || theirs.State != record.Interrupted {
		return nil
	}
	mine := *r.rec
	mine.Events = append(append([]record.Event(nil), theirs.Events...), r.rec.Events[len(r.rec.Events)-1])
	mine.Reason += " (recorded late: its lease had expired and the run was finalized as interrupted meanwhile)"
	b, err := mine.Encode()
	if err != nil {
		return err
	}
	_, err = f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(f.k.done(r.rec.RunID)), "=", kv.ModRevision)).
		Then(f.replaceOps(theirs, &mine, b)...).Commit()
	return f.wrap("record run "+string(r.rec.RunID), err)
}

// launchFailed records a command that could not be started.
func (r *run) launchFailed(err error) error {
	now := r.s.f.now()
	notFound := errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)
	code := 126
	if notFound {
		code = 127
	}
	reason := fmt.Sprintf("could not start %s: %v", r.rec.Command[0], err)
	r.rec.Finish(record.Failed, now, &code, reason)
	if werr := r.writeFinal(); werr != nil {
		return werr
	}
	le := &vocab.LaunchError{RunID: r.rec.RunID, NotFound: notFound, Reason: reason}
	if r.onLaunchFailed != nil {
		r.onLaunchFailed(le)
	}
	return le
}

// crewFailed records a run that crew could not launch for its own reasons.
// stoppedBeforeLaunch records a reserved run whose start was told to stop
// before its command started.
func (s *starter) stoppedBeforeLaunch(res *reserved, sig syscall.Signal) error {
	r := &run{s: s, rec: res.rec, rev: res.rev}
	name := vocab.SignalName(sig)
	r.rec.Signal = name
	r.rec.Finish(record.Stopped, s.f.now(), nil, fmt.Sprintf("crew received %s before the command started; it was never run", name))
	if err := r.writeFinal(); err != nil {
		return err
	}
	s.f.pruneLazily()
	return &vocab.SignalledError{Signal: sig, RunID: r.rec.RunID}
}

func (r *run) crewFailed(err error) error {
	now := r.s.f.now()
	code := 125
	r.rec.Finish(record.Failed, now, &code, "crew internal error: "+err.Error())
	_ = r.writeFinal()
	return &vocab.InternalError{RunID: r.rec.RunID, Err: err}
}

// replaceOps put final record mine (encoded as b) in place of theirs,
// index entry included.
func (f *Fleet) replaceOps(theirs, mine *record.Run, b []byte) []clientv3.Op {
	ops := f.finalOps(mine, b)
	if old := f.k.finished(theirs); old != f.k.finished(mine) {
		ops = append(ops, clientv3.OpDelete(old))
	}
	return ops
}
