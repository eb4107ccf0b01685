//go:build etcd

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// Resolve says which run a RUN|TASK argument names: a run id, or a task
// (its active run, else its newest finished one).
func (f *Fleet) Resolve(arg string) (record.RunID, error) {
	if record.LooksLikeRunID(arg) {
		id := record.RunID(arg)
		if _, err := f.Run(id); err != nil {
			return "", err
		}
		return id, nil
	}
	if record.IsShortID(arg) {
		if id, err := f.resolveShort(arg); err == nil || !errors.As(err, new(*vocab.NotFoundError)) {
			return id, err
		}
		// No run has that short id: it may be a task's name.
	}
	if err := record.ValidateTask(arg); err != nil {
		return "", &vocab.UsageError{Err: err}
	}
	ctx, cancel := f.ctx()
	v, err := f.read(ctx)
	cancel()
	if err != nil {
		return "", err
	}
	for _, a := range v.active {
		if a.rec != nil && a.rec.Task == arg {
			return a.id, nil
		}
	}
	for _, q := range v.queue {
		if q.t.Task == arg {
			return q.t.RunID, nil
		}
	}
	done, err := f.finished(arg, 1)
	if err != nil {
		return "", err
	}
	if len(done) == 1 {
		return done[0].RunID, nil
	}
	return "", &vocab.NotFoundError{Err: fmt.Errorf("no run of task %q in etcd store %s", arg, f.Loc.URL)}
}

// TaskOf is the task of run id, or "" if it cannot be read.
func (f *Fleet) TaskOf(id record.RunID) string {
	if v, err := f.Run(id); err == nil {
		return v.Task
	}
	if t, _, err := f.ticket(id); err == nil && t != nil {
		return t.Task
	}
	return ""
}

// Run is one run as crew status RUN-ID shows it. A run that is neither
// active nor finished is an error wrapping fs.ErrNotExist.
func (f *Fleet) Run(id record.RunID) (*vocab.RunView, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Txn(ctx).Then(
		clientv3.OpGet(f.k.active(id)), clientv3.OpGet(f.k.owner(id), clientv3.WithKeysOnly()), clientv3.OpGet(f.k.done(id)),
	).Commit()
	if err != nil {
		return nil, f.wrap("read run "+string(id), err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		rec, err := decodeRun(kvs[0].Value)
		if err != nil {
			return nil, fmt.Errorf("run %s: %s: %w", id, f.k.active(id), err)
		}
		v := liveView(activeRun{id: id, key: f.k.active(id), rec: rec, modRev: kvs[0].ModRevision,
			owned: len(resp.Responses[1].GetResponseRange().Kvs) == 1})
		return &v, nil
	}
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) == 1 {
		rec, err := decodeRun(kvs[0].Value)
		if err != nil {
			return nil, fmt.Errorf("run %s: %s: %w", id, f.k.done(id), err)
		}
		return &vocab.RunView{Run: *rec, Owner: record.Dead.String()}, nil
	}
	return nil, fmt.Errorf("no run %s in etcd store %s: %w", id, f.Loc.URL, fs.ErrNotExist)
}

// ticket reads run id's queue ticket, if it waits.
func (f *Fleet) ticket(id record.RunID) (*record.Ticket, int64, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.ticket(id))
	if err != nil {
		return nil, 0, f.wrap("read the queue", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	t, err := record.DecodeTicket(resp.Kvs[0].Value)
	return t, resp.Kvs[0].CreateRevision, err
}

// stopRequest is what crew stop leaves for a run's supervisor (or a
// waiting start) under stops/RUN.
func stopRequest(sig syscall.Signal, grace time.Duration, host string, now time.Time) *record.StopRequest {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return &record.StopRequest{PID: os.Getpid(), User: name + "@" + host, Signal: vocab.SignalName(sig),
		Signo: int(sig), At: now, Grace: grace.String()}
}

func (f *Fleet) putStop(id record.RunID, req *record.StopRequest) error {
	b, err := req.Encode()
	if err != nil {
		return err
	}
	ctx, cancel := f.ctx()
	defer cancel()
	_, err = f.cli.Put(ctx, f.k.stop(id), string(b))
	return f.wrap("ask run "+string(id)+" to stop", err)
}

// StopWaiter asks a waiting start to leave the queue: false if id is no
// waiting start.
func (f *Fleet) StopWaiter(id record.RunID, sig syscall.Signal) (bool, error) {
	t, _, err := f.ticket(id)
	if err != nil || t == nil {
		return false, err
	}
	return true, f.putStop(id, stopRequest(sig, 0, f.Host, f.now()))
}

// Stop asks run id's supervisor, wherever it runs, to stop the run, and
// waits for the run to be final: its supervisor watches stops/RUN. A run
// whose owner's lease is gone is finalized here.
func (f *Fleet) Stop(id record.RunID, opts vocab.StopOptions) (*record.Run, error) {
	if opts.Signal == syscall.SIGSTOP {
		// It would stop the lease guard with the command, and then
		// nothing stops the command when the lease runs out.
		return nil, &vocab.UsageError{Err: errors.New("crew stop --signal SIGSTOP is refused on an etcd store: it would freeze the run's lease guard too; use SIGTSTP to pause a command")}
	}
	v, err := f.Run(id)
	if err != nil {
		return nil, err
	}
	if !v.State.Active() {
		return &v.Run, nil
	}
	if err := f.putStop(id, stopRequest(opts.Signal, opts.Grace, f.Host, f.now())); err != nil {
		return nil, err
	}
	// The supervisor has the grace period, then its SIGKILL, then its
	// final write; a supervisor that does not answer loses its lease.
	ctx, cancel := context.WithTimeout(context.Background(), opts.Grace+10*time.Second)
	defer cancel()
	rec, err := f.WaitRun(ctx, id)
	if errors.Is(err, vocab.ErrWaitTimeout) {
		return nil, fmt.Errorf("run %s: its supervisor (crew process %d on host %s) did not end the run within %s of the stop request; "+
			"the request stays: the supervisor acts on it when it can, and the run's slot frees with its lease", id, v.SupervisorPID, v.Host, opts.Grace+10*time.Second)
	}
	return rec, err
}

// WaitRun waits until run id is final and returns its record; a run whose
// owner's lease is gone is finalized here (as recovery would).
func (f *Fleet) WaitRun(ctx context.Context, id record.RunID) (*record.Run, error) {
	for {
		v, err := f.Run(id)
		if err != nil {
			return nil, err
		}
		if !v.State.Active() {
			return &v.Run, nil
		}
		if !v.OwnerAlive {
			rctx, cancel := f.ctx()
			a := activeRun{id: id, key: f.k.active(id), rec: &v.Run}
			resp, err := f.cli.Get(rctx, a.key)
			cancel()
			if err == nil && len(resp.Kvs) == 1 {
				a.modRev = resp.Kvs[0].ModRevision
				if rec, err := f.finalizeDead(a); err == nil {
					return rec, nil
				}
			}
		}
		if err := f.awaitRunChange(ctx, id); err != nil {
			return nil, err
		}
	}
}

// awaitRunChange waits for a change of run id's record or owner key (or
// a few seconds, for a lease that expires during a partition).
func (f *Fleet) awaitRunChange(ctx context.Context, id record.RunID) error {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	wch := f.cli.Watch(clientv3.WithRequireLeader(wctx), f.k.p+"/", clientv3.WithPrefix())
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return vocab.ErrWaitTimeout
			}
			return nil
		case resp, ok := <-wch:
			if !ok || resp.Err() != nil {
				return nil
			}
			for _, ev := range resp.Events {
				if k := string(ev.Kv.Key); k == f.k.active(id) || k == f.k.owner(id) || k == f.k.done(id) {
					return nil
				}
			}
		}
	}
}

// stopWatch delivers the stop requests for run id to its supervisor.
func (f *Fleet) stopWatch(ctx context.Context, id record.RunID) <-chan *record.StopRequest {
	out := make(chan *record.StopRequest, 1)
	go func() {
		for ctx.Err() == nil {
			rctx, cancel := f.ctx()
			resp, err := f.cli.Get(rctx, f.k.stop(id))
			cancel()
			rev := int64(0)
			if err == nil {
				rev = resp.Header.Revision
				if len(resp.Kvs) == 1 {
					if r, err := record.DecodeStopRequest(resp.Kvs[0].Value); err == nil {
						select {
						case out <- r:
						case <-ctx.Done():
						}
						return
					}
				}
			}
			wctx, wcancel := context.WithCancel(ctx)
			wch := f.cli.Watch(clientv3.WithRequireLeader(wctx), f.k.stop(id), clientv3.WithRev(rev+1))
			for resp := range wch {
				if resp.Err() != nil || len(resp.Events) > 0 {
					break
				}
			}
			wcancel()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return out
}

// isStopKey reports whether key is a stop request of id.
func (f *Fleet) isStopKey(key string, id record.RunID) bool { return key == f.k.stop(id) }

// stopsOf lists the stop requests' run ids, for recover's sweep.
func (f *Fleet) stopsOf(ctx context.Context) ([]record.RunID, error) {
	resp, err := f.cli.Get(ctx, f.k.stopPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, f.wrap("list the stop requests", err)
	}
	var ids []record.RunID
	for _, kv := range resp.Kvs {
		ids = append(ids, record.RunID(strings.TrimPrefix(string(kv.Key), f.k.stopPrefix())))
	}
	return ids, nil
}

// RemoteLogError is a log kept on another host.
type RemoteLogError struct {
	RunID record.RunID
	Host  string
	Path  string
}

func (e *RemoteLogError) Error() string {
	return fmt.Sprintf("run %s ran on host %s: its log is kept there (%s); run crew logs on %s", e.RunID, e.Host, e.Path, e.Host)
}

// LogHere checks that run id's log is on this host, where Logs keeps it:
// a *RemoteLogError says where it is otherwise.
func (f *Fleet) LogHere(id record.RunID) error {
	v, err := f.Run(id)
	if errors.Is(err, fs.ErrNotExist) {
		if t, _, terr := f.ticket(id); terr == nil && t != nil {
			return nil // waiting: its log will be made here if it runs here
		}
	}
	if err != nil {
		return err
	}
	if v.Host != f.Host {
		path := "in its local state root"
		if f.Logs != nil {
			path = "at logs/" + string(id) + ".log of its local state root"
		}
		return &RemoteLogError{RunID: id, Host: v.Host, Path: path}
	}
	return nil
}

// maxCandidates is how many runs an ambiguous short id lists.
const maxCandidates = 10

// resolveShort finds the run whose id's random part begins with short,
// among the active, waiting and finished runs.
func (f *Fleet) resolveShort(short string) (record.RunID, error) {
	ctx, cancel := f.ctx()
	v, err := f.read(ctx)
	cancel()
	if err != nil {
		return "", err
	}
	var cands []vocab.Candidate
	seen := map[record.RunID]bool{}
	add := func(id record.RunID, task, state string) {
		if !seen[id] && id.HasShort(short) {
			seen[id] = true
			cands = append(cands, vocab.Candidate{ID: id, Task: task, State: state})
		}
	}
	for _, a := range v.active {
		if a.rec != nil {
			add(a.id, a.rec.Task, string(a.rec.State))
		}
	}
	for _, q := range v.queue {
		add(q.t.RunID, q.t.Task, "waiting")
	}
	ctx, cancel = f.ctx()
	resp, err := f.cli.Get(ctx, f.k.finishedPrefix(), clientv3.WithPrefix())
	cancel()
	if err != nil {
		return "", f.wrap("read the finished runs", err)
	}
	for _, kv := range resp.Kvs {
		_, id, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), f.k.finishedPrefix()), "/")
		var e finishEntry
		_ = json.Unmarshal(kv.Value, &e)
		add(record.RunID(id), e.Task, string(e.State))
	}
	switch len(cands) {
	case 0:
		return "", &vocab.NotFoundError{Err: fmt.Errorf("no run %s in etcd store %s", short, f.Loc.URL)}
	case 1:
		return cands[0].ID, nil
	}
	e := &vocab.AmbiguousError{Arg: short, Candidates: cands}
	if len(cands) > maxCandidates {
		e.Candidates, e.More = cands[:maxCandidates], len(cands)-maxCandidates
	}
	return "", e
}
