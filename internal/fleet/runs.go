//go:build etcd

package fleet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// Where is the store's URL.
func (f *Fleet) Where() backend.Where { return backend.Where{Name: f.Loc.URL, Kind: "etcd store"} }

// ConfigPath is the config's key.
func (f *Fleet) ConfigPath() string { return f.k.config() }

// LoadConfig reads the config key.
func (f *Fleet) LoadConfig() (record.Config, bool, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.config())
	if err != nil {
		return record.DefaultConfig(), false, f.wrap("read the config", err)
	}
	if len(resp.Kvs) == 0 {
		return record.DefaultConfig(), false, nil
	}
	cfg, err := record.DecodeConfig(resp.Kvs[0].Value)
	if err != nil {
		return record.DefaultConfig(), true, &vocab.ConfigError{Path: f.k.config(), Err: err}
	}
	return cfg, true, nil
}

func (f *Fleet) Runs() backend.Runs       { return runs{f} }
func (f *Fleet) Queue() backend.Queue     { return queue{f} }
func (f *Fleet) History() backend.History { return history{f} }
func (f *Fleet) Logs() backend.Logs       { return logs{f} }

// LeaseTTL is the lease TTL of the runs this process starts: the store's
// runs hold their slots by leases (backend.Leases).
func (f *Fleet) LeaseTTL() time.Duration { return f.ttl }

// snapshot reads the active set, its owners and the queue at one revision.
func (f *Fleet) snapshot() (*view, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	return f.read(ctx)
}

// runs is the store's records of runs.
type runs struct{ f *Fleet }

func (r runs) ListActive() ([]backend.ActiveEntry, error) {
	v, err := r.f.snapshot()
	if err != nil {
		return nil, err
	}
	out := make([]backend.ActiveEntry, 0, len(v.active))
	for _, a := range v.active {
		out = append(out, a.entry())
	}
	return out, nil
}

// ScanActive reads the active set with its owners in one snapshot; there
// is no faster index to count from.
func (r runs) ScanActive(bool) ([]backend.ActiveRun, error) {
	v, err := r.f.snapshot()
	if err != nil {
		return nil, err
	}
	return v.scan(), nil
}

// ReadRun reads a run's record, active or finished.
func (r runs) ReadRun(id record.RunID) (*record.Run, error) {
	f := r.f
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Txn(ctx).Then(clientv3.OpGet(f.k.active(id)), clientv3.OpGet(f.k.done(id))).Commit()
	if err != nil {
		return nil, f.wrap("read run "+string(id), err)
	}
	for i, key := range []string{f.k.active(id), f.k.done(id)} {
		if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) == 1 {
			rec, err := decodeRun(kvs[0].Value)
			if err != nil {
				return nil, fmt.Errorf("run %s: %s: %w", id, key, err)
			}
			return rec, nil
		}
	}
	return nil, r.missing(id)
}

func (r runs) missing(id record.RunID) error {
	return fmt.Errorf("no run %s in etcd store %s: %w", id, r.f.Loc.URL, fs.ErrNotExist)
}

// ReadActive reads a run's record in the active set.
func (r runs) ReadActive(id record.RunID) (*record.Run, error) {
	rec, _, err := r.f.readActive(id)
	return rec, err
}

// readActive reads a run's active record and its revision.
func (f *Fleet) readActive(id record.RunID) (*record.Run, int64, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.active(id))
	if err != nil {
		return nil, 0, f.wrap("read run "+string(id), err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, runs{f}.missing(id)
	}
	rec, err := decodeRun(resp.Kvs[0].Value)
	if err != nil {
		return nil, 0, fmt.Errorf("run %s: %s: %w", id, f.k.active(id), err)
	}
	return rec, resp.Kvs[0].ModRevision, nil
}

// OwnerState is whether the run's owner key exists on a lease: its lease
// lives. (One on no lease is foreign, and proves nothing.)
func (r runs) OwnerState(id record.RunID, _ *record.LockIDs) record.Owner {
	f := r.f
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.owner(id))
	if err != nil {
		return record.Owner{Owner: record.Unknown, Supervisor: record.Unknown, Err: f.wrap("read the owner of run "+string(id), err)}
	}
	return owner(len(resp.Kvs) == 1 && resp.Kvs[0].Lease != 0)
}

// leaseGone is how an etcd run's owner went (record.Run.EndDead).
const leaseGone = "lost its lease without finalizing the run (it died, froze, or lost contact with etcd for longer than the lease's TTL)"

// FinalizeDead records a run whose owner's lease is gone as interrupted.
func (r runs) FinalizeDead(id record.RunID, now time.Time) (backend.ReapOutcome, *record.Run, error) {
	return r.f.finalize(id, func(rec *record.Run) {
		// A run of another host's may have a log there: whether its
		// command started, this host cannot tell.
		logged := rec.Host != r.f.host || (r.f.logs != nil && r.f.logs.Logs().HasLog(id))
		rec.EndDead(now, leaseGone, logged)
	})
}

// FinalizeStopped records a run whose supervisor was gone as stopped by
// crew stop's req.
func (r runs) FinalizeStopped(id record.RunID, req *record.StopRequest, now time.Time) (backend.ReapOutcome, *record.Run, error) {
	return r.f.finalize(id, func(rec *record.Run) { rec.EndStopped(now, req) })
}

// finalize makes the active record of a run whose owner key is gone final
// with end, fenced by the record's revision and the owner key's being on
// no lease (absent, or foreign: it goes in the same transaction): never a
// run whose lease lives, and never one that changed meanwhile.
func (f *Fleet) finalize(id record.RunID, end func(*record.Run)) (backend.ReapOutcome, *record.Run, error) {
	rec, rev, err := f.readActive(id)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return backend.AlreadyDone, nil, nil
	case err != nil:
		return 0, nil, err
	}
	end(rec)
	b, err := rec.Encode()
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := f.ctx()
	defer cancel()
	key := f.k.active(id)
	resp, err := f.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", rev),
		clientv3.Compare(clientv3.LeaseValue(f.k.owner(id)), "=", 0),
	).Then(append(f.k.finalOps(rec, b), clientv3.OpDelete(key), clientv3.OpDelete(f.k.stop(id)), clientv3.OpDelete(f.k.owner(id)))...).Commit()
	if err != nil {
		return 0, nil, f.wrap("finalize run "+string(id), err)
	}
	if !resp.Succeeded {
		return backend.OwnerBusy, nil, nil // its owner came back, or someone wrote it meanwhile
	}
	return backend.Reaped, rec, nil
}

// WriteStopRequest puts crew stop's request where the run's supervisor
// (or the waiting start) watches.
func (r runs) WriteStopRequest(id record.RunID, req *record.StopRequest) error {
	b, err := req.Encode()
	if err != nil {
		return err
	}
	ctx, cancel := r.f.ctx()
	defer cancel()
	_, err = r.f.cli.Put(ctx, r.f.k.stop(id), string(b))
	return r.f.wrap("ask run "+string(id)+" to stop", err)
}

// ReadStopRequest is the request for run id, if any.
func (r runs) ReadStopRequest(id record.RunID) *record.StopRequest {
	req, _ := r.f.stopRequest(id)
	return req
}

// stopRequest reads the request for run id, and its revision.
func (f *Fleet) stopRequest(id record.RunID) (*record.StopRequest, int64) {
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.stop(id))
	if err != nil || len(resp.Kvs) == 0 {
		return nil, 0
	}
	return decodeStop(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
}

// decodeStop decodes a stop request read from etcd. Who may stop a run on
// an etcd store is whoever etcd lets write under its prefix (its own
// authentication is the access control: a fleet's runs are the fleet's),
// so the request stands as if written by the reader's own user.
func decodeStop(b []byte) *record.StopRequest {
	req, err := record.DecodeStopRequest(b)
	if err != nil {
		return nil
	}
	me := os.Geteuid()
	req.FileUID = &me
	return req
}

func (r runs) RemoveStopRequest(id record.RunID) error {
	ctx, cancel := r.f.ctx()
	defer cancel()
	_, err := r.f.cli.Delete(ctx, r.f.k.stop(id))
	return r.f.wrap("remove the stop request of "+string(id), err)
}

// queue is the store's queue of waiting starts.
type queue struct{ f *Fleet }

func (q queue) ListTickets() ([]backend.TicketEntry, error) {
	v, err := q.f.snapshot()
	if err != nil {
		return nil, err
	}
	return v.tickets(q.f.k), nil
}

// ListTicketsUntil: the queue is read whole, in one snapshot, anyway.
func (q queue) ListTicketsUntil(enough backend.Enough) ([]backend.TicketEntry, error) {
	ts, err := q.ListTickets()
	return backend.Until(ts, enough), err
}

func (q queue) HasTicket(id record.RunID) bool { return q.WaiterState(id) != record.Dead }

// WaiterState: a ticket lives as long as its waiter's lease.
func (q queue) WaiterState(id record.RunID) record.Liveness {
	ctx, cancel := q.f.ctx()
	defer cancel()
	resp, err := q.f.cli.Get(ctx, q.f.k.ticket(id))
	switch {
	case err != nil:
		return record.Unknown
	case len(resp.Kvs) == 0:
		return record.Dead
	}
	return waiterLiveness(resp.Kvs[0].Lease)
}

// Ring touches the waiter's ticket, keeping its value and lease: the
// waiter watches its own ticket (section.go). A ticket that is gone (its
// waiter admitted, or gone) is not made again: etcd refuses the put.
func (q queue) Ring(id record.RunID) {
	ctx, cancel := q.f.ctx()
	defer cancel()
	_, _ = q.f.cli.Put(ctx, q.f.k.ticket(id), "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())
}

func (q queue) QueuePath() string { return q.f.k.queuePrefix() }

// logs are the runs' logs this host keeps: a run's log is where its
// supervisor ran.
type logs struct{ f *Fleet }

func (l logs) HasLog(id record.RunID) bool { return l.f.logs != nil && l.f.logs.Logs().HasLog(id) }

func (l logs) LogPath(id record.RunID) string {
	if l.f.logs == nil {
		return ""
	}
	return l.f.logs.Logs().LogPath(id)
}

// What an etcd store is, to the orchestration.
var (
	_ backend.Store   = (*Fleet)(nil)
	_ backend.Adopter = (*Fleet)(nil)
	_ backend.Upkeep  = (*Fleet)(nil)
	_ backend.Leases  = (*Fleet)(nil)
	_ backend.Foreign = (*Fleet)(nil)
	_ backend.Lease   = (*lease)(nil)
)
