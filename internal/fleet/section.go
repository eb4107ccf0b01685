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
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

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

// starter is one crew start's standing with the store: its lease. The
// lease is the start's until it reserves a run; then it is the run's (its
// owner key is on it), and outlives Close.
type starter struct {
	f     *Fleet
	lease *lease
	// waiter is this start's place in line, once it waits.
	waiter *waiter
	// reserved: the lease is a run's now.
	reserved bool
}

// Begin grants the start's lease, trying for as long
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
	return &starter{f: f, lease: l}, nil
}

// Close lets go of the lease (with the ticket on it) unless a run holds
// its slot by it.
func (s *starter) Close() {
	if s.waiter != nil {
		s.waiter.stop()
	}
	if !s.reserved {
		s.lease.release()
	}
}

// holderNote is what an owner key says of the process that reserved its
// run, and what the admission mutex's holder of an earlier release said of
// itself (JSON).
type holderNote struct {
	Host  string    `json:"host"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
}

// LockAdmission takes no lock: admission on etcd is optimistic (issue 26).
// It reads the store in one snapshot, what the section's reads return, and
// every write of the section commits only if nothing that decision read
// has changed since (fence.go); a write that finds it changed is a
// *backend.ConflictError, and the orchestration decides again. So an
// admission costs one write to etcd, not four (a mutex key, its holder
// note, the reservation, the key's deletion), and starts on several hosts decide at
// once: they serialize only where they truly collide.
func (s *starter) LockAdmission(ctx context.Context, timeout time.Duration) (backend.Section, error) {
	if s.waiter != nil && (s.lease.lost() || s.lease.hasExpired()) {
		return nil, fmt.Errorf("lost the place in the queue of etcd store %s: this start's lease expired "+
			"(no contact with etcd for longer than its TTL of %s)", s.f.Loc.URL, s.lease.ttl)
	}
	var sec *section
	err := s.f.patiently("read the store for admission", min(timeout, unavailableFor), func(rctx context.Context) error {
		v, err := s.f.read(rctx)
		if err != nil {
			return err
		}
		sec = &section{s: s, v: v}
		return nil
	})
	return sec, err
}

// holderPatience bounds the read of who held an earlier release's
// admission mutex once a start timed out: a moment past the user's
// --lock-timeout, not a whole request's timeout when etcd does not answer.
const holderPatience = time.Second

// oldLockHolder is who holds the admission mutex of an earlier release of
// crew, by the note it keeps, for a timeout.
func (f *Fleet) oldLockHolder() vocab.Holder {
	ctx, cancel := context.WithTimeout(context.Background(), min(f.opTimeout, holderPatience))
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.admissionHolder())
	if err != nil || len(resp.Kvs) == 0 {
		return vocab.Holder{}
	}
	var n holderNote
	if json.Unmarshal(resp.Kvs[0].Value, &n) != nil {
		return vocab.Holder{}
	}
	return vocab.Holder{PID: n.PID, Host: n.Host, Since: n.Since}
}

func (s *starter) lostLease(what string) error {
	return fmt.Errorf("etcd store %s: could not %s: this start's lease of %s expired; nothing was written",
		s.f.Loc.URL, what, s.lease.ttl)
}

// section is the store as one snapshot read it, for one admission
// decision: every write commits only if nothing the decision read has
// changed since (fence), so a start that decided on a store another start
// changed meanwhile writes nothing, and decides again.
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

// ListTicketsUntil: the snapshot holds the whole queue already.
func (sec *section) ListTicketsUntil(enough backend.Enough) ([]backend.TicketEntry, error) {
	return backend.Until(sec.v.tickets(sec.s.f.k), enough), nil
}

// RemoveDeadTicket removes a queue key on no lease (one written by hand):
// a waiter's ticket goes with its lease by itself. It needs no fence: such
// a key never counted for anything.
func (sec *section) RemoveDeadTicket(id record.RunID) bool {
	f := sec.s.f
	key := f.k.ticket(id)
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(key), "=", 0)).
		Then(clientv3.OpDelete(key)).Commit()
	return err == nil && resp.Succeeded
}

// Reserve writes the provisioning record and the owner key, on this
// start's lease, in one transaction fenced by what the section read: etcd
// has it on a quorum's disks before it answers. A try whose answer was
// lost is found by its value when tried again.
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
		c, err := sec.commit(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, ops, key)
		switch {
		case err != nil:
			return err
		case c.done:
			rev = c.rev
			return nil
		case c.mine != nil && string(c.mine.Value) == string(b):
			rev = c.mine.ModRevision // an earlier try went in
			return nil
		case c.mine != nil:
			return fmt.Errorf("run %s: %w", rec.RunID, fs.ErrExist)
		case c.conflict != nil:
			return c.conflict
		}
		return s.lostLease("reserve the run")
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
// leaves the queue by itself if this process dies. It is not fenced by
// what the section read: a ticket is written only for a start the
// decision did not admit, and what was written since the read (a run
// reserved, a ticket ahead) only makes that decision more right; what was
// freed since (a run finished, the cap raised) is what the waiter looks
// for once it is in line, as it would after a lock (dispatch: admitWaiting
// evaluates once more before it sleeps). Fencing it would only make a
// burst of starts that join the queue at once collide with each other.
// Its place is its creation revision: after every ticket written before
// it. A try whose answer was lost is found by its value when tried again.
func (sec *section) Enqueue(t *record.Ticket) (backend.Waiter, error) {
	s, f := sec.s, sec.s.f
	b, err := t.Encode()
	if err != nil {
		return nil, err
	}
	key := f.k.ticket(t.RunID)
	var rev int64
	err = f.patiently("join the queue", unavailableFor, func(ctx context.Context) error {
		resp, err := f.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(b), clientv3.WithLease(s.lease.id))).Else(clientv3.OpGet(key)).Commit()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return s.lostLease("join the queue")
		case err != nil:
			return err
		case resp.Succeeded:
			rev = resp.Header.Revision
			return nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 && string(kvs[0].Value) == string(b) && kvs[0].Lease == int64(s.lease.id) {
			rev = kvs[0].ModRevision // an earlier try went in
			return nil
		}
		return fmt.Errorf("ticket %s: %w", t.RunID, fs.ErrExist)
	})
	if err != nil {
		return nil, err
	}
	s.waiter = newWaiter(s, t.RunID, rev)
	return s.waiter, nil
}

// MoveConfigAside keeps an unusable config under a key of its own, before
// crew init writes a new one: the config as the section read it, which it
// still is (fenced).
func (sec *section) MoveConfigAside(now time.Time) (string, error) {
	f := sec.s.f
	aside := fmt.Sprintf("%s.unusable.%s", f.k.config(), now.UTC().Format("20060102T150405Z"))
	if !sec.v.cfgExists {
		return "", fmt.Errorf("etcd store %s: keep the unusable config: %w", f.Loc.URL, fs.ErrNotExist)
	}
	ctx, cancel := f.ctx()
	defer cancel()
	c, err := sec.commit(ctx, nil, []clientv3.Op{clientv3.OpPut(aside, string(sec.v.cfgRaw))}, "")
	switch {
	case err != nil:
		return "", f.wrap("keep the unusable config", err)
	case !c.done:
		return "", c.conflict
	}
	return aside, nil
}

// SaveConfig writes the config, fenced by what the section read.
func (sec *section) SaveConfig(cfg record.Config) error {
	f := sec.s.f
	// Version 1: what changed in version 2 is how a state root keeps its
	// records; the etcd store's are JSON values as before.
	b, err := cfg.EncodeVersion(record.V1)
	if err != nil {
		return err
	}
	ctx, cancel := f.ctx()
	defer cancel()
	c, err := sec.commit(ctx, nil, []clientv3.Op{clientv3.OpPut(f.k.config(), string(b))}, "")
	switch {
	case err != nil:
		return f.wrap("write the config", err)
	case !c.done:
		return c.conflict
	}
	return nil
}

// Release lets go of nothing: the section holds no lock.
func (sec *section) Release() {}

// waiter is this start's place in line. It watches its own ticket (a ring
// touches it), its stop key and its lease, and what nobody announces (a
// lease that expired, the config changing): see watch.
type waiter struct {
	s       *starter
	id      record.RunID
	rung    chan struct{} // told to go (its ticket touched by a ring), or its own news: a stop request for it, its lease lost
	changed chan struct{} // what nobody announced that may let any waiter in

	// changes counts what it was told of (change), for the tests of who
	// is woken.
	changes atomic.Int64
	// head: this waiter is at the head of the line (line.go).
	head atomic.Bool
	// aheadLeft: the start just ahead left the line without a run, and
	// Sentinel was not asked since.
	aheadLeft atomic.Bool

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
func (w *waiter) change()                  { w.changes.Add(1); sendNonBlocking(w.changed) }
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

// watch rings the waiter when it is told to go: its ticket touched by a
// ring (queue.Ring: whoever frees capacity rings exactly the waiters it may
// let in) or gone, a stop request for it, its lease expired. It tells the
// waiter of the config written, and the head of the line of what nobody
// announces: a run's owner key gone while its record stays active (its
// lease expired); see line.go. So a finishing run wakes the waiter its slot
// can serve and the one that moves up, not every waiter (issue 26: the
// herd). A watch that ends (a leader change, a compacted revision) starts
// again from now, after one change, since changes may have been missed.
func (w *waiter) watch(ctx context.Context, rev int64) {
	defer close(w.done)
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		w.follow(wctx, w.watches(wctx, rev), rev)
		cancel()
		rev = 0
		w.change()
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// watched is one answer of one of the waiter's watches; !ok: that watch
// ended.
type watched struct {
	resp clientv3.WatchResponse
	ok   bool
}

// watches watches, after revision rev (0: from now), the waiter's own
// ticket and stop key, and the config, and merges what they deliver.
func (w *waiter) watches(ctx context.Context, rev int64) <-chan watched {
	f := w.s.f
	at := func(opts ...clientv3.OpOption) []clientv3.OpOption {
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev+1))
		}
		return opts
	}
	ctx = clientv3.WithRequireLeader(ctx)
	return merge(ctx,
		f.cli.Watch(ctx, f.k.ticket(w.id), at()...),
		f.cli.Watch(ctx, f.k.stop(w.id), at(clientv3.WithFilterDelete())...),
		f.cli.Watch(ctx, f.k.config(), at(clientv3.WithFilterDelete())...),
	)
}

// merge delivers what chans deliver, and a !ok once for each that ends.
func merge(ctx context.Context, chans ...clientv3.WatchChan) <-chan watched {
	out := make(chan watched)
	for _, ch := range chans {
		go func() {
			for resp := range ch {
				select {
				case out <- watched{resp: resp, ok: true}:
				case <-ctx.Done():
					return
				}
			}
			select {
			case out <- watched{}:
			case <-ctx.Done():
			}
		}()
	}
	return out
}

// follow reads the watches until one ends; rev is the revision the
// waiter's ticket was read at. Between its own keys it watches its place
// in line (line.go), found again whenever the ticket ahead goes: a waiter
// that moves up to the head is told to look (change), since the slot a
// run freed without a word may have been noticed by nobody since.
func (w *waiter) follow(ctx context.Context, in <-chan watched, rev int64) {
	ended := map[string]bool{} // runs whose active record was seen deleted
	for first := true; ctx.Err() == nil; first = false {
		st, err := w.place(ctx, rev)
		if err != nil {
			// Cannot tell (the revision compacted away, etcd not
			// answering): watch as the head does, from now, after a look.
			st, rev = standing{}, 0
			w.change()
		}
		if wasHead := w.head.Swap(st.head()); st.head() && !wasHead && !first {
			w.change()
		}
		pctx, cancel := context.WithCancel(ctx)
		moved, next := w.followPlace(pctx, in, w.watchPlace(pctx, st, rev), st, ended)
		cancel()
		if !moved {
			return
		}
		if !w.becameRun(ctx, st.ahead) {
			// The start ahead left the line without a run: it may have been
			// rung for a slot it never took (killed as it woke, its ticket
			// gone with its lease). Nobody rings again; this waiter looks,
			// and rings whoever may go (Sentinel).
			w.aheadLeft.Store(true)
			w.change()
		}
		rev = next
	}
}

// becameRun reports whether the ticket at key (gone from the line) became
// a run: its run's record is in the active set or among the finished runs.
// Where etcd does not answer, it says no: a look too many costs a read.
func (w *waiter) becameRun(ctx context.Context, key string) bool {
	f := w.s.f
	id := strings.TrimPrefix(key, f.k.queuePrefix())
	rctx, cancel := context.WithTimeout(ctx, f.opTimeout)
	defer cancel()
	resp, err := f.cli.Txn(rctx).Then(
		clientv3.OpGet(f.k.activePrefix()+id, clientv3.WithCountOnly()),
		clientv3.OpGet(f.k.donePrefix()+id, clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return false
	}
	return resp.Responses[0].GetResponseRange().Count+resp.Responses[1].GetResponseRange().Count > 0
}

// followPlace reads the waiter's own watches (in) and its place's (place)
// until one ends (moved false) or the ticket ahead went (moved true, at
// revision next).
func (w *waiter) followPlace(ctx context.Context, in <-chan watched, place clientv3.WatchChan, st standing, ended map[string]bool) (moved bool, next int64) {
	for {
		select {
		case <-ctx.Done():
			return false, 0
		case <-w.s.lease.expired:
			w.ring()
			<-ctx.Done()
			return false, 0
		case m := <-in:
			if !m.ok || m.resp.Canceled || m.resp.Err() != nil {
				return false, 0
			}
			for _, ev := range m.resp.Events {
				w.event(ev, ended)
			}
		case resp, ok := <-place:
			if !ok || resp.Canceled || resp.Err() != nil {
				return false, 0
			}
			if !st.head() && len(resp.Events) > 0 {
				return true, resp.Events[0].Kv.ModRevision // its delete
			}
			for _, ev := range resp.Events {
				w.event(ev, ended)
			}
		}
	}
}

// maxEnded bounds what a waiter remembers of finished runs.
const maxEnded = 4096

// event rings or tells the waiter of ev. A run's owner key deleted after
// its active record went is a run that finished (its finisher rings who
// its slot may let in); deleted while its record stays, it is a lease that
// expired, which nobody announces: every waiter is told.
func (w *waiter) event(ev *clientv3.Event, ended map[string]bool) {
	k, key := w.s.f.k, string(ev.Kv.Key)
	switch {
	case key == k.ticket(w.id), key == k.stop(w.id):
		w.ring() // rung, crew stop asks it to leave, or its place is gone
	case key == k.config():
		w.change()
	case strings.HasPrefix(key, k.activePrefix()):
		if len(ended) >= maxEnded {
			clear(ended)
		}
		ended[strings.TrimPrefix(key, k.activePrefix())] = true
	case strings.HasPrefix(key, k.ownerPrefix()):
		id := strings.TrimPrefix(key, k.ownerPrefix())
		if !ended[id] {
			w.change()
		}
		delete(ended, id)
	}
}
