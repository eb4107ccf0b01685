//go:build etcd

package fleet

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
)

// stopWatch is how a supervisor hears of crew stop's requests for its run
// on an etcd store: a watch on the run's stop key, which keeps the latest
// request in memory, so that looking for one costs no round trip.
type stopWatch struct {
	f       *Fleet
	id      record.RunID
	changed chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}

	mu  sync.Mutex
	req *record.StopRequest
	rev int64 // the request's revision, for the acknowledgement's fence
}

// watchStops reads the run's stop key and watches it from there.
func (f *Fleet) watchStops(id record.RunID) (backend.StopWatch, error) {
	ctx, cancel := f.ctx()
	resp, err := f.cli.Get(ctx, f.k.stop(id))
	cancel()
	if err != nil {
		return nil, f.wrap("read the stop request of run "+string(id), err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	w := &stopWatch{f: f, id: id, changed: make(chan struct{}, 1), cancel: wcancel, done: make(chan struct{})}
	if len(resp.Kvs) == 1 {
		w.req, w.rev = decodeStop(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
	}
	go w.watch(wctx, resp.Header.Revision)
	return w, nil
}

// watch follows the stop key from revision rev on; a watch that ends (a
// leader change) is started again from the key's current value.
func (w *stopWatch) watch(ctx context.Context, rev int64) {
	defer close(w.done)
	key := w.f.k.stop(w.id)
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		for resp := range w.f.cli.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithRev(rev+1)) {
			if resp.Canceled || resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				w.set(ev.Kv.Value, ev.Kv.ModRevision, ev.Type == clientv3.EventTypeDelete)
				rev = ev.Kv.ModRevision
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
		if r, rv := w.f.stopRequest(w.id); r != nil {
			w.mu.Lock()
			w.req, w.rev = r, rv
			w.mu.Unlock()
			sendNonBlocking(w.changed)
		}
	}
}

func (w *stopWatch) set(value []byte, rev int64, deleted bool) {
	w.mu.Lock()
	w.req, w.rev = nil, 0
	if !deleted {
		w.req, w.rev = decodeStop(value), rev
	}
	w.mu.Unlock()
	sendNonBlocking(w.changed)
}

func (w *stopWatch) Changed() <-chan struct{} { return w.changed }

// Notify: the watch tells of every change already.
func (w *stopWatch) Notify() bool { return true }

// Pending is the request not yet acknowledged, if any.
func (w *stopWatch) Pending() *record.StopRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.req == nil || w.req.Ack != nil {
		return nil
	}
	r := *w.req
	return &r
}

// Acknowledge writes the request back with ack, unless it changed since it
// was read (a newer request is taken up in its turn).
func (w *stopWatch) Acknowledge(req *record.StopRequest, ack record.StopAck) error {
	w.mu.Lock()
	rev := w.rev
	w.mu.Unlock()
	acked := *req
	acked.Ack = &ack
	b, err := acked.Encode()
	if err != nil {
		return err
	}
	ctx, cancel := w.f.ctx()
	defer cancel()
	key := w.f.k.stop(w.id)
	resp, err := w.f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return w.f.wrap("acknowledge the stop request of run "+string(w.id), err)
	}
	if resp.Succeeded {
		w.mu.Lock()
		if w.rev == rev {
			w.req, w.rev = &acked, resp.Header.Revision // taken up: not pending again
		}
		w.mu.Unlock()
	}
	return nil
}

func (w *stopWatch) Close() {
	w.cancel()
	<-w.done
}
