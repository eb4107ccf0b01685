//go:build etcd

package fleet

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

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/leaseguard"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/supervise"
	"github.com/crew-dev/crew/internal/vocab"
)

// SuperviseArg is the hidden command a detached run's supervisor runs as:
// crew SuperviseArg RUN-ID LEASE-ID REVISION, with the store in CREW_STORE
// and the handover pipe as fd 3.
const SuperviseArg = "__fleet-supervise"

// detach hands an admitted run to a supervisor process of its own. A
// lease belongs to no process: the child renews the same lease, so the
// slot is held without a gap, and this process stops renewing it (without
// revoking it) once the child says the command runs.
func (s *starter) detach(res *reserved) error {
	id := res.rec.RunID
	exe, err := os.Executable()
	if err != nil {
		return s.abandon(res, fmt.Errorf("find crew's own executable: %w", err))
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return s.abandon(res, fmt.Errorf("create the handover pipe: %w", err))
	}
	defer readyR.Close()
	c := exec.Command(exe, SuperviseArg, string(id), strconv.FormatInt(int64(s.lease.id), 16), strconv.FormatInt(res.rev, 10),
		s.req.Grace.String())
	c.Dir = res.rec.Dir
	c.Env = append(supervise.WithoutCrewVars(s.req.Env), "CREW_STORE="+s.f.Loc.URL, "CREW_HOST="+s.f.Host)
	if s.f.Logs != nil {
		c.Env = append(c.Env, "CREW_ROOT="+s.f.Logs.Root())
	}
	c.ExtraFiles = []*os.File{readyW}
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = c.Start()
	readyW.Close()
	if err != nil {
		return s.abandon(res, fmt.Errorf("start the detached supervisor: %w", err))
	}
	// Not ours to wait for: it outlives this process.
	_ = c.Process.Release()
	line, _ := bufio.NewReader(readyR).ReadString('\n')
	line = strings.TrimSpace(line)
	switch {
	case line == "running":
		s.lease.handOver()
		return nil
	case strings.HasPrefix(line, "launch "):
		s.lease.handOver() // the child recorded the failure
		kind, reason, _ := strings.Cut(strings.TrimPrefix(line, "launch "), " ")
		return &vocab.LaunchError{RunID: id, NotFound: kind == "notfound", Reason: reason}
	}
	s.lease.handOver() // the child ended the run, or it died: the lease says so
	if v, err := s.f.Run(id); err == nil && !v.State.Active() {
		return &vocab.InternalError{RunID: id, Err: fmt.Errorf("detached supervisor ended the run as %s: %s", v.State, v.Reason)}
	}
	return &vocab.InternalError{RunID: id, Err: errors.New("detached supervisor exited before the command started; the run's slot frees with its lease, and `crew recover` finalizes it")}
}

// abandon records a run this process could not hand over.
func (s *starter) abandon(res *reserved, err error) error {
	r := &run{s: s, rec: res.rec, rev: res.rev}
	return r.crewFailed(err)
}

// handOver stops renewing the lease without revoking it: another process
// renews it now.
func (l *lease) handOver() {
	l.mu.Lock()
	l.handedOver = true
	l.mu.Unlock()
}

// adopt takes over a lease another process granted, and renews it. Its
// validity is known only from a renewal this process sends.
func (f *Fleet) adopt(id clientv3.LeaseID) (*lease, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	sent := leaseguard.Monotonic()
	resp, err := f.cli.KeepAliveOnce(ctx, id)
	if err != nil {
		return nil, f.wrap(fmt.Sprintf("take over lease %x", int64(id)), err)
	}
	ttl := time.Duration(resp.TTL) * time.Second
	ttlResp, err := f.cli.TimeToLive(ctx, id)
	if err == nil && ttlResp.GrantedTTL > 0 {
		ttl = time.Duration(ttlResp.GrantedTTL) * time.Second
	}
	l := &lease{f: f, id: id, ttl: ttl, validUntil: sent + time.Duration(resp.TTL)*time.Second, lastContact: sent,
		stop: make(chan struct{}), done: make(chan struct{}), expired: make(chan struct{})}
	go l.renew()
	return l, nil
}

// SuperviseDetached is the detached supervisor: it adopts the run's lease,
// launches the command (output to the run's log only, stdin from
// /dev/null), tells the parent on ready once the record says running (or
// why not), and supervises the run to its end.
func (f *Fleet) SuperviseDetached(id record.RunID, leaseID string, rev int64, grace time.Duration, ready *os.File, signals <-chan os.Signal) error {
	lid, err := strconv.ParseInt(leaseID, 16, 64)
	if err != nil {
		return fmt.Errorf("lease id %q: %w", leaseID, err)
	}
	tell := func(line string) {
		if ready != nil {
			fmt.Fprintln(ready, line)
			ready.Close()
			ready = nil
		}
	}
	defer tell("failed")
	l, err := f.adopt(clientv3.LeaseID(lid))
	if err != nil {
		return err
	}
	defer l.release()
	failpoint.Hit(failpoint.DetachHandover) // tests: die holding the run, before its command starts
	ctx, cancel := f.ctx()
	resp, err := f.cli.Get(ctx, f.k.active(id))
	cancel()
	if err != nil {
		return f.wrap("read run "+string(id), err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != rev {
		return fmt.Errorf("run %s changed before its detached supervisor took it over", id)
	}
	rec, err := decodeRun(resp.Kvs[0].Value)
	if err != nil {
		return fmt.Errorf("run %s: %w", id, err)
	}
	rec.AddEvent(f.now(), "handed over to detached supervisor pid %d (from pid %d)", os.Getpid(), rec.SupervisorPID)
	rec.SupervisorPID = os.Getpid()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	s := &starter{f: f, lease: l, req: vocab.StartRequest{
		AdmitRequest: vocab.AdmitRequest{Task: rec.Task, Command: rec.Command, Dir: rec.Dir},
		Grace:        grace, Stdin: devnull, Stdout: nil, Stderr: nil, Env: os.Environ(),
		Signals: signals, Warn: func(error) {},
	}}
	s.req.Env = supervise.WithoutCrewVars(s.req.Env)
	r := &run{s: s, rec: rec, rev: rev, onRunning: func() { tell("running") }, onLaunchFailed: func(le *vocab.LaunchError) {
		kind := "noexec"
		if le.NotFound {
			kind = "notfound"
		}
		tell("launch " + kind + " " + le.Reason)
	}}
	return r.supervise()
}
