//go:build etcd

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// starter is one crew start's admission: its lease, and the session and
// mutex it takes the admission lock with.
type starter struct {
	f     *Fleet
	req   vocab.StartRequest
	lease *lease
	sess  *concurrency.Session
	mu    *concurrency.Mutex
	// ticket is this start's place in line, once it waits.
	ticket *record.Ticket
}

// reserved is an admitted run: its provisioning record is in etcd at rev,
// with its owner key on the starter's lease.
type reserved struct {
	rec      *record.Run
	rev      int64
	warnings []error
}

// holderNote is what the admission lock's holder says of itself (JSON).
type holderNote struct {
	Host  string    `json:"host"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
}

// holderNote is the write that says who holds the admission lock, for a
// start that times out waiting for it; it rides on the first read.
func (s *starter) holderNote() clientv3.Op {
	note, _ := json.Marshal(holderNote{Host: s.f.Host, PID: os.Getpid(), Since: s.f.now()})
	return clientv3.OpPut(s.f.k.admissionHolder(), string(note), clientv3.WithLease(s.lease.id))
}

// lock takes the admission mutex within req.LockTimeout.
func (s *starter) lock(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.req.LockTimeout)
	defer cancel()
	err := s.mu.Lock(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		h, herr := s.f.lockHolder()
		return &vocab.LockTimeoutError{Path: s.f.Loc.URL, Waited: s.req.LockTimeout, Holder: h, HoldErr: herr, Lease: true}
	}
	return s.f.wrap("take the admission lock", err)
}

func (s *starter) unlock() {
	ctx, cancel := s.f.ctx()
	defer cancel()
	_ = s.mu.Unlock(ctx) // if this fails, the key goes with the lease
}

// lockHolder is who holds the admission lock, for a timeout.
func (f *Fleet) lockHolder() (vocab.Holder, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.admissionHolder())
	if err != nil {
		return vocab.Holder{}, err
	}
	if len(resp.Kvs) == 0 {
		return vocab.Holder{}, errors.New("no holder note")
	}
	var n holderNote
	if err := json.Unmarshal(resp.Kvs[0].Value, &n); err != nil {
		return vocab.Holder{}, fmt.Errorf("the holder note is unreadable: %w", err)
	}
	return vocab.Holder{PID: n.PID, Host: n.Host, Since: n.Since}, nil
}

// Start admits, launches and supervises one run on the fleet: the same
// meaning and errors as dispatch's Start.
func (f *Fleet) Start(req vocab.StartRequest, ttl time.Duration) (record.RunID, error) {
	if req.Warn == nil {
		req.Warn = func(error) {}
	}
	if err := record.ValidateNewTask(req.Task); err != nil {
		return "", &vocab.UsageError{Err: err}
	}
	l, err := f.grantPatiently(ttl, min(req.LockTimeout, unavailableFor))
	if err != nil {
		return "", err
	}
	defer l.release()
	sess, err := concurrency.NewSession(f.cli, concurrency.WithLease(l.id))
	if err != nil {
		return "", f.wrap("open a session", err)
	}
	s := &starter{f: f, req: req, lease: l, sess: sess, mu: concurrency.NewMutex(sess, f.k.admissionLock())}

	// A stop signal while waiting for the lock or in line abandons the
	// start; once admitted, the supervisor takes the signals.
	var res *reserved
	sig := dispatch.WatchStopSignals(req.Signals, func(ctx context.Context) { res, err = s.admit(ctx) })
	if s.ticket != nil && res == nil {
		s.f.dropStop(s.ticket.RunID) // a crew stop that told it to leave
	}
	if err != nil {
		if sig != 0 {
			return "", signalled(sig, "")
		}
		var refused *vocab.RefusedError
		if errors.As(err, &refused) {
			for _, w := range refused.Warnings {
				req.Warn(w)
			}
		}
		return "", err
	}
	for _, w := range res.warnings {
		req.Warn(w)
	}
	if sig != 0 {
		// The signal came as the run was reserved: the watcher took it,
		// so no supervisor will hear it. The run is recorded as stopped
		// and its command never started, as on a local state root.
		return res.rec.RunID, s.stoppedBeforeLaunch(res, sig)
	}
	if req.Detach {
		return res.rec.RunID, s.detach(res)
	}
	return res.rec.RunID, s.supervise(res)
}

// admit runs the admission critical section until the start is admitted,
// refused, or (with --wait) gives up.
func (s *starter) admit(ctx context.Context) (*reserved, error) {
	var deadline <-chan time.Time
	if s.req.Wait && s.req.WaitTimeout > 0 {
		t := time.NewTimer(s.req.WaitTimeout)
		defer t.Stop()
		deadline = t.C
	}
	var unavailableSince time.Time
	for {
		res, ar, err := s.attempt(ctx)
		var down *UnavailableError
		if errors.As(err, &down) && ctx.Err() == nil {
			// A leader change, or a member gone: etcd answers again
			// within an election or two. Beyond that, say so.
			if unavailableSince.IsZero() {
				unavailableSince = time.Now()
			}
			if time.Since(unavailableSince) < min(s.req.LockTimeout, unavailableFor) {
				select {
				case <-time.After(250 * time.Millisecond):
					continue
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
		if err == nil {
			unavailableSince = time.Time{}
		}
		if res != nil {
			failpoint.Hit(failpoint.Reserved)
		}
		if err != nil || res != nil {
			if res != nil && s.req.OnWait != nil && s.ticket != nil {
				s.req.OnWait(vocab.WaitProgress{RunID: res.rec.RunID, Task: s.req.Task, Admitted: true, Since: s.ticket.CreatedAt})
			}
			return res, err
		}
		if !s.req.Wait {
			return nil, ar.refusal(s)
		}
		if s.req.OnWait != nil {
			s.req.OnWait(ar.progress(s))
		}
		if err := s.sleep(ctx, ar.view.rev, deadline); err != nil {
			if errors.Is(err, errGaveUp) {
				e := ar.refusal(s)
				e.WaitedFor = s.req.WaitTimeout
				return nil, e
			}
			return nil, err
		}
	}
}

// unavailableFor is how long a start keeps trying while etcd does not
// answer (bounded by --lock-timeout): long enough for leader elections,
// short enough that a cluster without quorum is reported promptly.
const unavailableFor = 10 * time.Second

// attemptResult is an attempt that did not admit.
type attemptResult struct {
	view    *view
	usage   admission.Usage
	verdict admission.Verdict
}

func (ar *attemptResult) refusal(s *starter) *vocab.RefusedError {
	return dispatch.Refusal(s.req.Task, s.req.Pool, ar.view.cfg, ar.usage, ar.verdict, ar.view.warnings())
}

func (ar *attemptResult) progress(s *starter) vocab.WaitProgress {
	p := vocab.WaitProgress{RunID: s.ticket.RunID, Task: s.req.Task, Position: ar.verdict.Position,
		Reason: ar.verdict.Reason, InUse: ar.usage.InUse, Maximum: ar.view.cfg.MaximumInProgress, Pool: s.req.Pool,
		PoolInUse: ar.usage.PoolUse[s.req.Pool], PoolMax: ar.view.cfg.Pools[s.req.Pool],
		BlockingRun: ar.verdict.BlockingRun, Oldest: ar.usage.Oldest(), Since: s.ticket.CreatedAt}
	if ar.view.cfgErr != nil {
		p.ConfigErr = ar.view.cfgErr.Error()
	}
	return p
}

// attempt is one pass through the admission critical section.
func (s *starter) attempt(ctx context.Context) (*reserved, *attemptResult, error) {
	if s.ticket != nil && (s.lease.lost() || s.lease.hasExpired()) {
		return nil, nil, fmt.Errorf("lost the place in the queue of etcd store %s: this start's lease expired "+
			"(no contact with etcd for longer than its TTL of %s)", s.f.Loc.URL, s.lease.ttl)
	}
	if err := s.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer s.unlock()
	rctx, cancel := s.f.ctx()
	defer cancel()
	v, err := s.f.read(rctx, s.holderNote())
	if err != nil {
		return nil, nil, err
	}
	// A reservation or ticket this start wrote in an earlier attempt whose
	// answer was lost (etcd committed it, then the connection went): it is
	// this start's own, on its lease.
	for _, a := range v.active {
		if a.owned && a.ownerLease == int64(s.lease.id) && a.rec != nil && a.rec.SupervisorPID == os.Getpid() {
			return &reserved{rec: a.rec, rev: a.modRev, warnings: v.warnings()}, nil, nil
		}
	}
	if s.ticket == nil {
		for _, q := range v.queue {
			if q.lease == int64(s.lease.id) && q.t.PID == os.Getpid() && q.t.Host == s.f.Host {
				s.ticket = q.t
			}
		}
	}
	s.f.reap(v, s.req.Task, s.mu.IsOwner())
	if v.cfgErr != nil && !s.req.Wait {
		return nil, nil, v.cfgErr
	}
	if s.req.Pool != "" && v.cfgErr == nil {
		if _, ok := v.cfg.Pools[s.req.Pool]; !ok {
			return nil, nil, dispatch.UnknownPool(s.req.Pool, v.cfg)
		}
	}
	u := v.usage()
	c := admission.Candidate{Task: s.req.Task, Pool: s.req.Pool, Force: s.req.Force}
	if s.ticket != nil {
		c.Ticket = s.ticket.RunID
	}
	verdict := admission.Decide(v.cfg, u, v.tickets(), c)
	if v.cfgErr != nil {
		verdict = admission.Verdict{Reason: admission.WaitConfig}
	}
	ar := &attemptResult{view: v, usage: u, verdict: verdict}
	if !verdict.Admit {
		if s.req.Wait && s.ticket == nil {
			if err := s.join(rctx); err != nil {
				return nil, nil, err
			}
			// The place in line is new: decide again with it, so the
			// progress shown is this waiter's own.
			ar.verdict.Position = len(v.queue) + 1
		}
		return nil, ar, nil
	}
	res, err := s.reserve(rctx, v, u, verdict)
	return res, nil, err
}

// join puts this start in line: a ticket on its lease, so that it leaves
// the queue by itself if this process dies.
func (s *starter) join(ctx context.Context) error {
	now := s.f.now()
	t := &record.Ticket{Version: record.TicketVersion, RunID: record.NewRunID(now), Task: s.req.Task, Pool: s.req.Pool,
		Command: s.req.Command, Host: s.f.Host, PID: os.Getpid(), CreatedAt: now}
	b, err := t.Encode()
	if err != nil {
		return err
	}
	resp, err := s.f.cli.Txn(ctx).If(s.mu.IsOwner()).
		Then(clientv3.OpPut(s.f.k.ticket(t.RunID), string(b), clientv3.WithLease(s.lease.id))).Commit()
	if err != nil {
		return s.f.wrap("join the queue", err)
	}
	if !resp.Succeeded {
		return s.lostMutex("join the queue")
	}
	s.ticket = t
	return nil
}

func (s *starter) lostMutex(what string) error {
	return fmt.Errorf("etcd store %s: could not %s: this start no longer holds the admission lock (its lease of %s expired); nothing was written",
		s.f.Loc.URL, what, s.lease.ttl)
}

// reserve writes the provisioning record and the owner key in one
// transaction fenced by the admission mutex: etcd has it on a quorum's
// disks before the mutex is released.
func (s *starter) reserve(ctx context.Context, v *view, u admission.Usage, verdict admission.Verdict) (*reserved, error) {
	now := s.f.now()
	id := record.NewRunID(now)
	if s.ticket != nil {
		id = s.ticket.RunID
	}
	rec := &record.Run{
		Version: record.RecordVersion, RunID: id, Task: s.req.Task, State: record.Provisioning,
		Command: s.req.Command, Dir: s.req.Dir, Host: s.f.Host, CreatedAt: now, SupervisorPID: os.Getpid(),
		Forced: verdict.Forced, Pool: s.req.Pool, Parent: s.req.Parent,
		SlotsInUse: u.InUse, MaximumInProgress: v.cfg.MaximumInProgress, Timeout: record.Duration(s.req.Timeout),
		LogMax: s.logMax(v.cfg), Retries: s.req.Retries, RetryDelay: record.Duration(s.req.RetryDelay),
	}
	if s.ticket != nil {
		rec.QueuedAt = &s.ticket.CreatedAt
		rec.AddEvent(s.ticket.CreatedAt, "queued on host %s", s.f.Host)
	}
	what := "admitted"
	if verdict.Forced {
		what = "admitted with --force past the cap"
	}
	rec.AddEvent(now, "%s (%d/%d slots in use) on host %s, %s", what, u.InUse, v.cfg.MaximumInProgress, s.f.Host, s.lease)
	b, err := rec.Encode()
	if err != nil {
		return nil, err
	}
	owner, _ := json.Marshal(holderNote{Host: s.f.Host, PID: os.Getpid(), Since: now})
	ops := []clientv3.Op{
		clientv3.OpPut(s.f.k.active(id), string(b)),
		clientv3.OpPut(s.f.k.owner(id), string(owner), clientv3.WithLease(s.lease.id)),
	}
	if s.ticket != nil {
		ops = append(ops, clientv3.OpDelete(s.f.k.ticket(id)))
	}
	resp, err := s.f.cli.Txn(ctx).
		If(s.mu.IsOwner(), clientv3.Compare(clientv3.CreateRevision(s.f.k.active(id)), "=", 0)).
		Then(ops...).Commit()
	if err != nil {
		return nil, s.f.wrap("reserve the run", err)
	}
	if !resp.Succeeded {
		return nil, s.lostMutex("reserve the run")
	}
	return &reserved{rec: rec, rev: resp.Header.Revision, warnings: v.warnings()}, nil
}

// maxReapsPerAdmission bounds the finalizing one admission does for
// others' dead runs; the task's own dead runs are always finalized, so
// that a task never has two active records.
const maxReapsPerAdmission = 8

// reap finalizes dead runs found in v, fenced by fence (the admission
// mutex) and each by its record's revision and its owner key's absence.
func (f *Fleet) reap(v *view, task string, fence clientv3.Cmp) {
	n := 0
	for _, a := range v.active {
		if a.owned || a.rec == nil || (n >= maxReapsPerAdmission && a.rec.Task != task) {
			continue
		}
		if _, err := f.finalizeDead(a, fence); err == nil {
			n++
		}
	}
}

// finalizeDead records a run whose owner's lease is gone as interrupted,
// unless its record changed since it was read or its owner key came back.
func (f *Fleet) finalizeDead(a activeRun, fence ...clientv3.Cmp) (*record.Run, error) {
	r := *a.rec
	r.Events = append([]record.Event(nil), a.rec.Events...)
	now := f.now()
	who := fmt.Sprintf("owner crew process %d on host %s", r.SupervisorPID, r.Host)
	reason := who + " lost its lease without finalizing the run (it died, froze, or lost contact with etcd for longer than the lease's TTL); exit status unknown"
	if r.State == record.Provisioning {
		reason = who + " lost its lease before it recorded the command's start (the command may have started); exit status unknown"
	}
	r.Finish(record.Interrupted, now, nil, reason)
	b, err := r.Encode()
	if err != nil {
		return nil, err
	}
	ctx, cancel := f.ctx()
	defer cancel()
	cmps := append([]clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(a.key), "=", a.modRev),
		clientv3.Compare(clientv3.CreateRevision(f.k.owner(a.id)), "=", 0),
	}, fence...)
	resp, err := f.cli.Txn(ctx).If(cmps...).
		Then(append(f.finalOps(&r, b), clientv3.OpDelete(a.key))...).Commit()
	if err != nil {
		return nil, f.wrap("finalize run "+string(a.id), err)
	}
	if !resp.Succeeded {
		return nil, errFenced
	}
	return &r, nil
}

// errGaveUp is a --wait=D that ran out.
var errGaveUp = errors.New("gave up waiting")

// sleep waits until something changes that could let this waiter in:
// a run's owner key or record goes, a ticket goes, the config changes.
// It first asks, without the lock, whether the change makes a difference,
// so that one freed slot does not send every waiter into the lock.
func (s *starter) sleep(ctx context.Context, rev int64, deadline <-chan time.Time) error {
	for {
		wctx, cancel := context.WithCancel(ctx)
		wch := s.f.cli.Watch(clientv3.WithRequireLeader(wctx), s.f.k.p+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		_, err := s.awaitChange(ctx, wch, deadline)
		cancel()
		if err != nil {
			return err
		}
		select {
		case <-s.lease.expired:
			// The ticket went with the lease: the next attempt says so,
			// or finds etcd unreachable.
			return nil
		default:
		}
		// Something changed, or the watch ended (a leader change, a
		// compacted revision): look again at the current revision.
		rctx, rcancel := s.f.ctx()
		v, err := s.f.read(rctx)
		rcancel()
		if err != nil {
			return nil // let the attempt say what is wrong
		}
		if err := s.f.stopAsked(s.ticket.RunID); err != nil {
			return err
		}
		if v.cfgErr != nil || s.mightGo(v) {
			return nil
		}
		rev = v.rev
	}
}

// awaitChange reads wch until a relevant change (true), the watch ends
// (false), the lease expires (true), or the wait is over (an error).
func (s *starter) awaitChange(ctx context.Context, wch clientv3.WatchChan, deadline <-chan time.Time) (bool, error) {
	// A safety net: a watch can miss nothing, but a lease that expires
	// while etcd is partitioned from this host is only seen on reconnect.
	poll := time.NewTimer(5 * time.Second)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-deadline:
			return false, errGaveUp
		case <-s.lease.expired:
			return true, nil
		case <-poll.C:
			return true, nil
		case resp, ok := <-wch:
			if !ok || resp.Canceled || resp.Err() != nil {
				return false, nil
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut && s.f.isStopKey(string(ev.Kv.Key), s.ticket.RunID) {
					if req, err := record.DecodeStopRequest(ev.Kv.Value); err == nil {
						return false, &vocab.SignalledError{Signal: syscall.Signal(req.Signo), By: req.Who()}
					}
				}
				if s.relevant(ev) {
					return true, nil
				}
			}
		}
	}
}

func (s *starter) relevant(ev *clientv3.Event) bool {
	key := string(ev.Kv.Key)
	switch {
	case key == s.f.k.config():
		return true
	case ev.Type != clientv3.EventTypeDelete:
		return false
	}
	return strings.HasPrefix(key, s.f.k.ownerPrefix()) || strings.HasPrefix(key, s.f.k.activePrefix()) ||
		strings.HasPrefix(key, s.f.k.queuePrefix())
}

// mightGo reports whether this waiter would be admitted on v, counting
// dead runs as gone (admission will reap them).
func (s *starter) mightGo(v *view) bool {
	c := admission.Candidate{Ticket: s.ticket.RunID, Task: s.req.Task, Pool: s.req.Pool}
	return admission.Decide(v.cfg, v.usage(), v.tickets(), c).Admit
}

// dropStop removes a stop request that was acted on.
func (f *Fleet) dropStop(id record.RunID) {
	ctx, cancel := f.ctx()
	defer cancel()
	_, _ = f.cli.Delete(ctx, f.k.stop(id)) // recover sweeps it otherwise
}

// stopAsked is the SignalledError for a crew stop that told waiting start
// id to leave, if one did.
func (f *Fleet) stopAsked(id record.RunID) error {
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.stop(id))
	if err != nil || len(resp.Kvs) == 0 {
		return nil
	}
	req, err := record.DecodeStopRequest(resp.Kvs[0].Value)
	if err != nil {
		return nil
	}
	return &vocab.SignalledError{Signal: syscall.Signal(req.Signo), By: req.Who()}
}

// logMax is the run's log cap: crew start --log-max, else the config's.
func (s *starter) logMax(cfg record.Config) int64 {
	switch {
	case s.req.LogMax == vocab.LogMaxNone:
		return 0
	case s.req.LogMax > 0:
		return s.req.LogMax
	}
	return cfg.LogMax
}
