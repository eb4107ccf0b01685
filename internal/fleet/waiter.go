//go:build etcd

package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
)

// What a waiting start hands to a background waiter (crew start --detach
// --wait), and what that waiter leaves behind if it never runs.

// HandOver is the store and the start's lease, for a background waiter
// that renews the same lease: the ticket is on it, so the place in line
// is kept without a gap, and goes with the lease if the waiter dies.
func (w *waiter) HandOver() backend.HandOver {
	return backend.HandOver{Store: []string{"--store", w.s.f.Loc.URL},
		Adopt: []string{strconv.FormatInt(int64(w.s.lease.id), 16)}}
}

// Release stops watching for this start, and lets the lease be renewed by
// the background waiter alone: closing the start then stops this
// process's renewals without revoking it.
func (w *waiter) Release() {
	w.stop()
	w.s.lease.handOver()
}

// errTicketGone: the waiter's ticket is not on its lease any more.
var errTicketGone = errors.New("its ticket is gone (its lease expired, or it left the queue)")

// LeaveWith moves the ticket to the finished runs as rec in one
// transaction fenced by the ticket being still on the waiter's lease: the
// record is in etcd as the ticket goes. A try whose answer was lost is
// found by its value when tried again.
func (w *waiter) LeaveWith(rec *record.Run) error {
	w.stop()
	f := w.s.f
	b, err := rec.Encode()
	if err != nil {
		return err
	}
	key := f.k.ticket(w.id)
	ops := append(f.k.finalOps(rec, b), clientv3.OpDelete(key))
	return f.patiently("record the start "+string(w.id)+" that never ran", finishPatience, func(ctx context.Context) error {
		resp, err := f.cli.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(key), "=", int64(w.s.lease.id))).
			Then(ops...).Else(clientv3.OpGet(f.k.done(w.id))).Commit()
		switch {
		case err != nil:
			return err
		case resp.Succeeded:
			return nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 && string(kvs[0].Value) == string(b) {
			return nil // an earlier try went in
		}
		return errTicketGone
	})
}

// AdoptWaiter takes over a waiting start whose lease its parent handed
// over (waiter.HandOver): it renews the lease, checks that the ticket is
// still on it, and stands on it as Begin's start does; its watch starts from the revision the ticket was read at,
// so that nothing after that read goes unseen.
func (f *Fleet) AdoptWaiter(id record.RunID, values []string, _ []*os.File) (backend.Starter, backend.Waiter, error) {
	if len(values) != 1 {
		return nil, nil, fmt.Errorf("waiting start %s: %d values handed over, want its lease", id, len(values))
	}
	lid, err := strconv.ParseInt(values[0], 16, 64)
	if err != nil {
		return nil, nil, fmt.Errorf("waiting start %s: lease %q: %w", id, values[0], err)
	}
	l, err := f.adopt(clientv3.LeaseID(lid))
	if err != nil {
		return nil, nil, err
	}
	// Whatever fails below, the lease stays the parent's: not revoked.
	giveBack := func() { l.handOver(); l.release() }
	rev, err := f.ticketOnLease(id, lid)
	if err != nil {
		giveBack()
		return nil, nil, err
	}
	s := &starter{f: f, lease: l}
	s.waiter = newWaiter(s, id, rev)
	return s, s.waiter, nil
}

// ticketOnLease checks that ticket id is in the queue on lease lid, and
// returns the revision it was read at.
func (f *Fleet) ticketOnLease(id record.RunID, lid int64) (int64, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.ticket(id))
	if err != nil {
		return 0, f.wrap("read the ticket of "+string(id), err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease != lid {
		return 0, fmt.Errorf("take over the place in line of %s: %w", id, errTicketGone)
	}
	return resp.Header.Revision, nil
}
