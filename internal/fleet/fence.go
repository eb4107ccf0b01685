//go:build etcd

package fleet

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// The fence of an optimistic admission (issue 26). A decision reads the
// config, the active set with its owner keys, and the queue at revision R
// (view.read); its write (a reservation, crew init's config; not a ticket,
// see Enqueue) commits only if, at the instant of the commit:
//
//   - no key of the active set was created after R: no run was reserved
//     that the decision did not count (a record written over, provisioning
//     to running, keeps its creation revision, and is no new run; an owner
//     key is created only with its run's record, so it needs no compare);
//   - no ticket was created after R: nobody joined the queue that the
//     decision did not line up behind (a ring touches a ticket and keeps
//     its creation revision);
//   - the config is the one read (its modification revision, 0 if there
//     was none: a config deleted by hand fails it too);
//   - no key on a lease is under PREFIX/locks/dispatch-admission/: no crew
//     of an earlier release, which takes the admission mutex there, is
//     inside (or waiting for) its critical section. It fences its writes
//     by the mutex alone and would not see ours, so ours wait until its
//     keys are gone; keys on no lease there are foreign, and do not count.
//
// Deletions are not compared, on purpose: a run that finished, a lease
// that expired, a waiter that left only take away what the decision
// counted against it. Fewer runs and fewer tickets never turn an
// admission into a wait (admission.Decide hands capacity to the queue in
// arrival order; without a ticket, every younger one finds at least the
// room it found with it, and its task no longer claimed), and the
// admission lock of old let them happen inside its section just the same:
// a finish or an expiry never took it. So the fence keeps out exactly the
// writes the lock kept out: reservations, tickets, the config.
//
// No counter or generation key is stored: the count stays derived from
// the records. And there is one fence for the whole store, not one per
// pool: the global cap (and the one queue, where a pool's waiter keeps a
// younger start of its task behind it) couples every pool to every other,
// so a reservation in one pool can change any other's decision.
func (sec *section) fence() []clientv3.Cmp {
	if failpoint.Skip(failpoint.AdmissionLock) {
		return nil // test builds only: prove that the tests catch a missing fence
	}
	k, after := sec.s.f.k, sec.v.rev+1
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(k.activePrefix()), "<", after).WithPrefix(),
		clientv3.Compare(clientv3.CreateRevision(k.queuePrefix()), "<", after).WithPrefix(),
		clientv3.Compare(clientv3.ModRevision(k.config()), "=", sec.v.cfgModRev),
		clientv3.Compare(clientv3.LeaseValue(k.admissionLock()+"/"), "=", 0).WithPrefix(),
	}
}

// committed is what a fenced write found.
type committed struct {
	done bool  // the write went in
	rev  int64 // at this revision
	// mine is the key an earlier try of the write would have made, if it
	// exists (when the write did not go in).
	mine *mvccpb.KeyValue
	// conflict is what changed since the section's read, if the fence
	// did not hold.
	conflict *backend.ConflictError
}

// commit writes ops if the fence and cmps hold; otherwise it reads key
// (the write's own, "" for none) and what changed, in the same round trip.
func (sec *section) commit(ctx context.Context, cmps []clientv3.Cmp, ops []clientv3.Op, key string) (committed, error) {
	f := sec.s.f
	fence := sec.fence()
	els := sec.whatChanged()
	if key != "" {
		els = append(els, clientv3.OpGet(key))
	}
	resp, err := f.cli.Txn(ctx).If(append(fence, cmps...)...).Then(ops...).Else(els...).Commit()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return committed{}, sec.s.lostLease("write to the store") // a put on the start's lease
	}
	if err != nil {
		return committed{}, err
	}
	if resp.Succeeded {
		return committed{done: true, rev: resp.Header.Revision}, nil
	}
	var c committed
	rs := resp.Responses
	if key != "" {
		if kvs := rs[len(rs)-1].GetResponseRange().Kvs; len(kvs) == 1 {
			c.mine = kvs[0]
		}
	}
	if c.conflict = sec.conflict(rs); c.conflict != nil {
		f.conflicts.Add(1)
	}
	return c, nil
}

// whatChanged reads, where the fence failed, what broke it: the newest
// run and ticket created since the read, the config, and an earlier
// release's mutex keys (a page: one on a lease is enough).
func (sec *section) whatChanged() []clientv3.Op {
	k, after := sec.s.f.k, sec.v.rev+1
	newest := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithMinCreateRev(after),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1)}
	return []clientv3.Op{
		clientv3.OpGet(k.activePrefix(), newest...),
		clientv3.OpGet(k.queuePrefix(), newest...),
		clientv3.OpGet(k.config()),
		clientv3.OpGet(k.admissionLock()+"/", clientv3.WithPrefix(), clientv3.WithLimit(txnOps)),
	}
}

// conflict says what whatChanged found (nil if the fence held: a compare
// of the write's own failed).
func (sec *section) conflict(rs []*etcdserverpb.ResponseOp) *backend.ConflictError {
	f := sec.s.f
	c := &backend.ConflictError{Path: f.Loc.URL}
	var run, ticket *mvccpb.KeyValue
	if kvs := rs[0].GetResponseRange().Kvs; len(kvs) == 1 {
		run = kvs[0]
	}
	if kvs := rs[1].GetResponseRange().Kvs; len(kvs) == 1 {
		ticket = kvs[0]
	}
	var cfgRev int64
	if kvs := rs[2].GetResponseRange().Kvs; len(kvs) == 1 {
		cfgRev = kvs[0].ModRevision
	}
	oldLock := false
	for _, kv := range rs[3].GetResponseRange().Kvs {
		oldLock = oldLock || kv.Lease != 0
	}
	switch {
	case run != nil && (ticket == nil || run.CreateRevision > ticket.CreateRevision):
		c.Change, c.By = "a run was reserved ("+string(run.Key)+")", reserver(run.Value)
	case ticket != nil:
		c.Change, c.By = "a start joined the queue ("+string(ticket.Key)+")", joiner(ticket.Value)
	case cfgRev != sec.v.cfgModRev:
		c.Change = "the config (" + f.k.config() + ") was written"
	case oldLock:
		c.Change = "a crew of an earlier release held the admission mutex under " + f.k.admissionLock() +
			"/ (this crew commits nothing while one does; upgrade every host)"
		c.By = f.oldLockHolder()
	default:
		return nil
	}
	return c
}

// reserver is who reserved a run, by its record.
func reserver(b []byte) vocab.Holder {
	r, err := decodeRun(b)
	if err != nil {
		return vocab.Holder{}
	}
	return vocab.Holder{PID: r.SupervisorPID, Host: r.Host, Since: r.CreatedAt}
}

// joiner is who joined the queue, by its ticket.
func joiner(b []byte) vocab.Holder {
	t, err := record.DecodeTicket(b)
	if err != nil {
		return vocab.Holder{}
	}
	return vocab.Holder{PID: t.PID, Host: t.Host, Since: t.CreatedAt}
}
