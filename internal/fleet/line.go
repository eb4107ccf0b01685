//go:build etcd

package fleet

import (
	"context"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/record"
)

// Where a waiter stands in line decides what it watches besides its own
// keys (issue 26, the herd). Only the head of the line watches the runs:
// a run whose lease expired frees its slot without a word, and the head,
// told of it, rings whoever may go (dispatch: a sentinel's change). Every
// other waiter watches only the ticket just ahead of its own, as etcd's
// queue recipes do: when that ticket goes (its start admitted, gone, or
// dead), it finds its place again. So a finish wakes the waiter its slot
// serves (rung) and the one behind it (moved up), not every waiter; and a
// waiter that cannot tell where it stands watches as the head does.

// standing is what a waiter watches for its place in line: the runs (the
// head, or one that cannot tell), or the ticket just ahead.
type standing struct {
	ahead string // key of the ticket just ahead; "" for the head
}

func (s standing) head() bool { return s.ahead == "" }

// place reads the line as it was at revision rev (the waiter's watches
// start after it, so that nothing between the read and the watch goes
// unseen) and returns where this waiter stands in it. A ticket ahead
// counts only if it is one crew wrote (on a lease, named and holding a
// ticket of its run): a foreign key never goes, and a waiter behind one
// would never hear of a slot freed without a word.
func (w *waiter) place(ctx context.Context, rev int64) (standing, error) {
	f := w.s.f
	rctx, cancel := context.WithTimeout(ctx, f.opTimeout)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := f.cli.Get(rctx, f.k.queuePrefix(), opts...)
	if err != nil {
		return standing{}, err
	}
	own := f.k.ticket(w.id)
	ahead := ""
	for _, kv := range resp.Kvs {
		if string(kv.Key) == own {
			return standing{ahead: ahead}, nil
		}
		if isTicketOf(f.k, kv) {
			ahead = string(kv.Key)
		}
	}
	return standing{}, errTicketGone
}

// isTicketOf reports whether kv is a waiting start's ticket as crew writes
// it: on a lease, under its run's id, holding that run's ticket.
func isTicketOf(k keys, kv *mvccpb.KeyValue) bool {
	if kv.Lease == 0 {
		return false
	}
	id, err := record.ParseRunID(strings.TrimPrefix(string(kv.Key), k.queuePrefix()))
	if err != nil {
		return false
	}
	t, err := record.DecodeTicket(kv.Value)
	return err == nil && t.RunID == id
}

// watchPlace watches, after revision rev, what the waiter's standing asks
// for: the deletes from owners/ to the active set (owner keys, tickets,
// records: one range, so in revision order) for the head, the ticket
// ahead's delete for any other.
func (w *waiter) watchPlace(ctx context.Context, s standing, rev int64) clientv3.WatchChan {
	f := w.s.f
	opts := []clientv3.OpOption{clientv3.WithFilterPut()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev+1))
	}
	ctx = clientv3.WithRequireLeader(ctx)
	if s.head() {
		return f.cli.Watch(ctx, f.k.ownerPrefix(), append(opts, clientv3.WithRange(clientv3.GetPrefixRangeEnd(f.k.activePrefix())))...)
	}
	return f.cli.Watch(ctx, s.ahead, opts...)
}

// Sentinel reports whether this waiter is the one told of what nobody
// announces (the head of the line, or the waiter behind a start that left
// the line without a run): it must ring the waiters who may go when it
// cannot go itself.
func (w *waiter) Sentinel() bool { return w.aheadLeft.Swap(false) || w.head.Load() }
