//go:build etcd

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// unavailableFor is how long a start keeps trying while etcd does not
// answer (bounded by --lock-timeout): long enough for leader elections,
// short enough that a cluster without quorum is reported promptly.
const unavailableFor = 10 * time.Second

// patiently runs op until it succeeds, fails for a reason other than etcd
// not answering, or patience runs out: a leader change or a member going
// away is over within an election or two. op must be safe to repeat (a
// transaction fenced so that a repeat of one that went in changes nothing).
// No request outlives patience.
func (f *Fleet) patiently(what string, patience time.Duration, op func(ctx context.Context) error) error {
	give := time.Now().Add(patience)
	for {
		ctx, cancel := f.ctxBy(give)
		err := f.wrapWithin(what, op(ctx), patience)
		cancel()
		var down *UnavailableError
		if err == nil || !errors.As(err, &down) || !pause(give) {
			return err
		}
	}
}

// starter is one crew start's standing with the store: its lease, and the
// session and mutex it takes the admission lock with. The lease is the
// start's until it reserves a run; then it is the run's (its owner key is
// on it), and outlives Close.
type starter struct {
	f     *Fleet
	lease *lease
	sess  *concurrency.Session
	mu    *concurrency.Mutex
	// waiter is this start's place in line, once it waits.
	waiter *waiter
	// reserved: the lease is a run's now.
	reserved bool
}

// Begin grants the start's lease and opens its session, trying for as long
// as ctx allows (at most unavailableFor) while etcd does not answer.
func (f *Fleet) Begin(ctx context.Context) (backend.Starter, error) {
	patience := unavailableFor
	if d, ok := ctx.Deadline(); ok {
		patience = min(patience, time.Until(d))
	}
	l, err := f.grantPatiently(f.ttl, patience)
	if err != nil {
		return nil, err
	}
	sess, err := concurrency.NewSession(f.cli, concurrency.WithLease(l.id))
	if err != nil {
		l.release()
		return nil, f.wrap("open a session", err)
	}
	return &starter{f: f, lease: l, sess: sess, mu: concurrency.NewMutex(sess, f.k.admissionLock())}, nil
}

// Close lets go of the session; the lease goes too (with the ticket and
// the mutex key on it) unless a run holds its slot by it.
func (s *starter) Close() {
	s.sess.Orphan() // the session's keep-alive: ours renews the lease
	if s.waiter != nil {
		s.waiter.stop()
	}
	if !s.reserved {
		s.lease.release()
	}
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
	note, _ := json.Marshal(holderNote{Host: s.f.host, PID: os.Getpid(), Since: s.f.stamp()})
	return clientv3.OpPut(s.f.k.admissionHolder(), string(note), clientv3.WithLease(s.lease.id))
}

// LockAdmission takes the admission mutex within timeout and reads the
// store under it, in one snapshot: what the section's reads return.
func (s *starter) LockAdmission(ctx context.Context, timeout time.Duration) (backend.Section, error) {
	if s.waiter != nil && (s.lease.lost() || s.lease.hasExpired()) {
		return nil, fmt.Errorf("lost the place in the queue of etcd store %s: this start's lease expired "+
			"(no contact with etcd for longer than its TTL of %s)", s.f.Loc.URL, s.lease.ttl)
	}
	var sec *section
	deadline := time.Now().Add(timeout)
	err := s.f.patiently("take the admission lock", min(timeout, unavailableFor), func(context.Context) error {
		if err := s.lock(ctx, deadline, timeout); err != nil {
			return err
		}
		rctx, cancel := s.f.ctx()
		defer cancel()
		v, err := s.f.read(rctx, s.holderNote())
		if err != nil {
			s.unlock()
			return err
		}
		sec = &section{s: s, v: v}
		return nil
	})
	return sec, err
}

// lock takes the admission mutex by deadline, timeout after the first try.
func (s *starter) lock(ctx context.Context, deadline time.Time, timeout time.Duration) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	err := s.mu.Lock(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		h, herr := s.f.lockHolder()
		return &vocab.LockTimeoutError{Path: s.f.Loc.URL, Waited: timeout, Holder: h, HoldErr: herr, Lease: true}
	}
	return err
}

func (s *starter) unlock() {
	ctx, cancel := s.f.ctx()
	defer cancel()
	_ = s.mu.Unlock(ctx) // if this fails, the key goes with the lease
}

// holderPatience bounds the read of who holds the admission lock once a
// start timed out waiting for it: a moment past the user's --lock-timeout,
// not a whole request's timeout when etcd does not answer.
const holderPatience = time.Second

// lockHolder is who holds the admission lock, for a timeout.
func (f *Fleet) lockHolder() (vocab.Holder, error) {
	ctx, cancel := context.WithTimeout(context.Background(), min(f.opTimeout, holderPatience))
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

func (s *starter) lostMutex(what string) error {
	return fmt.Errorf("etcd store %s: could not %s: this start no longer holds the admission lock (its lease of %s expired); nothing was written",
		s.f.Loc.URL, what, s.lease.ttl)
}

// section is the held admission mutex, and the store as it was read once
// the mutex was taken. Every write is fenced by the mutex (IsOwner), so a
// holder whose lease expired meanwhile writes nothing.
type section struct {
	s *starter
	v *view
}

func (sec *section) LoadConfig() (record.Config, bool, error) {
	return sec.v.cfg, sec.v.cfgExists, sec.v.cfgErr
}

func (sec *section) ScanActive() ([]backend.ActiveRun, error) { return sec.v.scan(), nil }
func (sec *section) ListTickets() ([]backend.TicketEntry, error) {
	return sec.v.tickets(sec.s.f.k), nil
}

// RemoveDeadTicket removes a queue key on no lease (one written by hand):
// a waiter's ticket goes with its lease by itself.
func (sec *section) RemoveDeadTicket(id record.RunID) bool {
	f := sec.s.f
	key := f.k.ticket(id)
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Txn(ctx).If(sec.s.mu.IsOwner(), clientv3.Compare(clientv3.LeaseValue(key), "=", 0)).
		Then(clientv3.OpDelete(key)).Commit()
	return err == nil && resp.Succeeded
}

// Reserve writes the provisioning record and the owner key, on this
// start's lease, in one transaction fenced by the admission mutex: etcd has
// it on a quorum's disks before the mutex is released. A try whose answer
// was lost is found by its value when tried again.
func (sec *section) Reserve(rec *record.Run) (backend.Run, error) {
	s, f := sec.s, sec.s.f
	b, err := rec.Encode()
	if err != nil {
		return nil, err
	}
	key := f.k.active(rec.RunID)
	note, _ := json.Marshal(holderNote{Host: f.host, PID: os.Getpid(), Since: rec.CreatedAt})
	ops := []clientv3.Op{
		clientv3.OpPut(key, string(b)),
		clientv3.OpPut(f.k.owner(rec.RunID), string(note), clientv3.WithLease(s.lease.id)),
		clientv3.OpDelete(f.k.ticket(rec.RunID)),
	}
	var rev int64
	err = f.patiently("reserve the run", unavailableFor, func(ctx context.Context) error {
		resp, err := f.cli.Txn(ctx).If(s.mu.IsOwner(), clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(ops...).Else(clientv3.OpGet(key)).Commit()
		switch {
		case err != nil:
			return err
		case resp.Succeeded:
			rev = resp.Header.Revision
			return nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		switch {
		case len(kvs) == 1 && string(kvs[0].Value) == string(b):
			rev = kvs[0].ModRevision // an earlier try went in
			return nil
		case len(kvs) == 1:
			return fmt.Errorf("run %s: %w", rec.RunID, fs.ErrExist)
		}
		return s.lostMutex("reserve the run")
	})
	if err != nil {
		return nil, err
	}
	s.reserved = true
	if f.logs != nil {
		_ = f.logs.Ensure() // where the run's log goes; the supervisor says if it cannot
	}
	return &run{f: f, id: rec.RunID, lease: s.lease, rev: rev}, nil
}

// Enqueue puts ticket t in the queue on this start's lease, so that it
// leaves the queue by itself if this process dies.
func (sec *section) Enqueue(t *record.Ticket) (backend.Waiter, error) {
	s, f := sec.s, sec.s.f
	b, err := t.Encode()
	if err != nil {
		return nil, err
	}
	var rev int64
	err = f.patiently("join the queue", unavailableFor, func(ctx context.Context) error {
		resp, err := f.cli.Txn(ctx).If(s.mu.IsOwner()).
			Then(clientv3.OpPut(f.k.ticket(t.RunID), string(b), clientv3.WithLease(s.lease.id))).Commit()
		switch {
		case err != nil:
			return err
		case !resp.Succeeded:
			return s.lostMutex("join the queue")
		}
		rev = resp.Header.Revision
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.waiter = newWaiter(s, t.RunID, rev)
	return s.waiter, nil
}

// MoveConfigAside keeps an unusable config under a key of its own, before
// crew init writes a new one.
func (sec *section) MoveConfigAside(now time.Time) (string, error) {
	f := sec.s.f
	aside := fmt.Sprintf("%s.unusable.%s", f.k.config(), now.UTC().Format("20060102T150405Z"))
	ctx, cancel := f.ctx()
	defer cancel()
	get, err := f.cli.Get(ctx, f.k.config())
	if err != nil || len(get.Kvs) == 0 {
		return "", f.wrap("read the config", err)
	}
	resp, err := f.cli.Txn(ctx).If(sec.s.mu.IsOwner()).Then(clientv3.OpPut(aside, string(get.Kvs[0].Value))).Commit()
	if err == nil && !resp.Succeeded {
		return "", sec.s.lostMutex("keep the unusable config")
	}
	return aside, f.wrap("keep the unusable config", err)
}

// SaveConfig writes the config, fenced by the mutex.
func (sec *section) SaveConfig(cfg record.Config) error {
	f := sec.s.f
	b, err := cfg.Encode()
	if err != nil {
		return err
	}
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Txn(ctx).If(sec.s.mu.IsOwner()).Then(clientv3.OpPut(f.k.config(), string(b))).Commit()
	if err == nil && !resp.Succeeded {
		return sec.s.lostMutex("write the config")
	}
	return f.wrap("write the config", err)
}

func (sec *section) Release() { sec.s.unlock() }

// waiter is this start's place in line. It watches the store for what
// may let it in (a slot or ticket going, the config changing), for a stop
// request of its own, and for its lease expiring: each rings it.
type waiter struct {
	s       *starter
	id      record.RunID
	rung    chan struct{} // its own news: a stop request for it, its lease lost
	changed chan struct{} // what may let any waiter in

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func newWaiter(s *starter, id record.RunID, rev int64) *waiter {
	ctx, cancel := context.WithCancel(context.Background())
	w := &waiter{s: s, id: id, rung: make(chan struct{}, 1), changed: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go w.watch(ctx, rev)
	return w
}

func (w *waiter) ID() record.RunID         { return w.id }
func (w *waiter) Rung() <-chan struct{}    { return w.rung }
func (w *waiter) Changed() <-chan struct{} { return w.changed }
func (w *waiter) ring()                    { sendNonBlocking(w.rung) }
func (w *waiter) change()                  { sendNonBlocking(w.changed) }
func (w *waiter) stop()                    { w.once.Do(func() { w.cancel(); <-w.done }) }

func sendNonBlocking(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Remove takes the ticket out of the queue.
func (w *waiter) Remove() {
	w.stop()
	ctx, cancel := w.s.f.ctx()
	defer cancel()
	_, _ = w.s.f.cli.Delete(ctx, w.s.f.k.ticket(w.id)) // if this fails, it goes with the lease
}

// watch rings the waiter on every relevant change after revision rev, and
// when the lease expires; a watch that ends (a leader change, a compacted
// revision) starts again from now, after one ring, since changes may have
// been missed.
func (w *waiter) watch(ctx context.Context, rev int64) {
	defer close(w.done)
	f := w.s.f
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev+1))
		}
		wch := f.cli.Watch(clientv3.WithRequireLeader(wctx), f.k.p+"/", opts...)
		rev = w.follow(ctx, wch)
		cancel()
		w.change()
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// follow reads wch until it ends, ringing on relevant events, and returns
// the revision to resume after (0: from now).
func (w *waiter) follow(ctx context.Context, wch clientv3.WatchChan) int64 {
	var rev int64
	for {
		select {
		case <-ctx.Done():
			return rev
		case <-w.s.lease.expired:
			w.ring()
			<-ctx.Done()
			return rev
		case resp, ok := <-wch:
			if !ok || resp.Canceled || resp.Err() != nil {
				return 0
			}
			rev = resp.Header.Revision
			for _, ev := range resp.Events {
				switch {
				case string(ev.Kv.Key) == w.s.f.k.stop(w.id) && ev.Type == clientv3.EventTypePut:
					w.ring() // crew stop asks it to leave
				case w.relevant(ev):
					w.change()
				}
			}
		}
	}
}

// relevant: what may let a waiter in (an owner key, record or ticket
// going; the config changing).
func (w *waiter) relevant(ev *clientv3.Event) bool {
	k, key := w.s.f.k, string(ev.Kv.Key)
	switch {
	case key == k.config():
		return ev.Type == clientv3.EventTypePut
	case ev.Type != clientv3.EventTypeDelete:
		return false
	}
	return strings.HasPrefix(key, k.ownerPrefix()) || strings.HasPrefix(key, k.activePrefix()) ||
		strings.HasPrefix(key, k.queuePrefix())
}
