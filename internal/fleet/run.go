//go:build etcd

package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
)

// run is an admitted run as the process that reserved it (then its
// supervisor) holds it: its owner key is on lease, and every write of its
// record is fenced by the revision this process last wrote, so that a
// finalizer that found the lease gone (and finalized the run) is never
// overwritten.
type run struct {
	f     *Fleet
	id    record.RunID
	lease *lease
	rev   int64
}

func (r *run) ID() record.RunID { return r.id }

// Release stops renewing the lease without revoking it: another process
// (a detached supervisor) renews it now.
func (r *run) Release() {
	r.lease.handOver()
	r.lease.release()
}

// Update writes rec over the run's active record, trying again for a
// while if etcd does not answer.
func (r *run) Update(rec *record.Run) error {
	b, err := rec.Encode()
	if err != nil {
		return err
	}
	f, key := r.f, r.f.k.active(r.id)
	return f.patiently("record run "+string(r.id), finishPatience, func(ctx context.Context) error {
		resp, err := f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", r.rev)).
			Then(clientv3.OpPut(key, string(b))).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			r.rev = resp.Header.Revision
			return nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 && string(kvs[0].Value) == string(b) {
			r.rev = kvs[0].ModRevision // an earlier try went in, and its answer was lost
			return nil
		}
		return fmt.Errorf("%w: its lease expired, and it was finalized meanwhile", errFenced)
	})
}

// finishPatience bounds how long one Finish waits for etcd to answer; the
// supervisor then says so, and keeps trying (FinishAgain).
const finishPatience = 5 * time.Second

// Finish moves the final record to the finished runs and takes the owner
// key (the slot) away in the same transaction: the record is in etcd as
// the slot goes, and waiters hear of both in one event (the lease is
// revoked afterwards; see Close).
func (r *run) Finish(rec *record.Run) error {
	err := r.f.patiently("finalize run "+string(r.id), finishPatience, func(context.Context) error { return r.moveToDone(rec) })
	if errors.Is(err, errFenced) {
		err = r.replaceInterrupted(rec)
	}
	if err != nil {
		return err
	}
	// The slot is free already: the owner key went with the record. The
	// revocation only spares etcd the lease's TTL, so it is not made to
	// wait for: the waiters are rung meanwhile (Close waits for it).
	r.f.revoking.Add(1)
	go func() {
		defer r.f.revoking.Done()
		r.lease.release()
	}()
	return nil
}

func (r *run) FinishAgain(rec *record.Run) error { return r.Finish(rec) }

// errNoOutcomeFile: an etcd store keeps a run's outcome in etcd only.
var errNoOutcomeFile = errors.New("an etcd store keeps a run's outcome in etcd only; `crew recover` records the run as interrupted if etcd never takes it")

func (r *run) KeepOutcome(*record.Run, error) error { return errNoOutcomeFile }
func (r *run) OutcomePath() string                  { return r.f.k.active(r.id) }

// moveToDone writes the final record to runs/done and its index entry and
// removes the active one, fenced by the active record's revision.
func (r *run) moveToDone(rec *record.Run) error {
	f := r.f
	b, err := rec.Encode()
	if err != nil {
		return err
	}
	ctx, cancel := f.ctx()
	defer cancel()
	key := f.k.active(r.id)
	resp, err := f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", r.rev)).
		Then(append(f.k.finalOps(rec, b), clientv3.OpDelete(key), clientv3.OpDelete(f.k.stop(r.id)), clientv3.OpDelete(f.k.owner(r.id)))...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		if rev, ok := r.ownRevision(rec); ok && rev != r.rev {
			// A write of this process's whose answer was lost went in.
			r.rev = rev
			return r.moveToDone(rec)
		}
		return errFenced
	}
	return nil
}

// ownRevision is the revision of the run's active record if it is still
// this supervisor's own (an active record of this process on this host).
func (r *run) ownRevision(mine *record.Run) (int64, bool) {
	cur, rev, err := r.f.readActive(r.id)
	if err != nil || cur.SupervisorPID != mine.SupervisorPID || cur.Host != mine.Host || !cur.State.Active() {
		return 0, false
	}
	return rev, true
}

// replaceInterrupted: the run was finalized by someone else because its
// lease expired. What this process knows goes in place of "exit status
// unknown", unless the record there says more than that.
func (r *run) replaceInterrupted(rec *record.Run) error {
	f := r.f
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.done(r.id))
	if err != nil {
		return f.wrap("read run "+string(r.id), err)
	}
	if len(resp.Kvs) == 0 {
		return fmt.Errorf("run %s: its record was removed while it ran; its outcome (%s) is not recorded", r.id, rec.Reason)
	}
	kv := resp.Kvs[0]
	theirs, err := decodeRun(kv.Value)
	if err != nil || theirs.State != record.Interrupted {
		return nil
	}
	mine := *rec
	mine.Events = append(append([]record.Event(nil), theirs.Events...), rec.Events[len(rec.Events)-1])
	mine.Reason += " (recorded late: its lease had expired and the run was finalized as interrupted meanwhile)"
	b, err := mine.Encode()
	if err != nil {
		return err
	}
	ops := f.k.finalOps(&mine, b)
	if old := f.k.finished(theirs); old != f.k.finished(&mine) {
		ops = append(ops, clientv3.OpDelete(old))
	}
	_, err = f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(f.k.done(r.id)), "=", kv.ModRevision)).Then(ops...).Commit()
	return f.wrap("record run "+string(r.id), err)
}

// ReadStopRequest is crew stop's request for the run, if any.
func (r *run) ReadStopRequest() *record.StopRequest { return runs{r.f}.ReadStopRequest(r.id) }

// WatchStops watches the run's stop key.
func (r *run) WatchStops() (backend.StopWatch, error) { return r.f.watchStops(r.id) }

// OthersHold is false: the lease guard ends the command's whole group with
// the attempt, and what left the group is no holder of the lease.
func (r *run) OthersHold() (bool, error) { return false, nil }
func (r *run) Holders() ([]int, error)   { return nil, nil }

func (r *run) LeaveToOthers(*record.Run) error {
	return errors.New("an etcd run's slot is its lease, which nothing but its supervisor holds")
}

// Claim is the lease: the command knows the store, and runs under a guard.
func (r *run) Claim() backend.Claim { return leaseClaim{r} }

// HandOver is the store and the lease (with the record's revision), for
// a detached supervisor that renews the same lease: the slot is held
// without a gap.
func (r *run) HandOver() backend.HandOver {
	return backend.HandOver{Store: append([]string{"--store", r.f.Loc.URL}, r.f.creds.args()...),
		Adopt: []string{strconv.FormatInt(int64(r.lease.id), 16), strconv.FormatInt(r.rev, 10)}}
}

// Adopt takes over a run whose lease its parent handed over (HandOver).
func (f *Fleet) Adopt(id record.RunID, values []string, _ []*os.File) (backend.Run, error) {
	if len(values) != 2 {
		return nil, fmt.Errorf("run %s: %d values handed over, want its lease and revision", id, len(values))
	}
	lid, err := strconv.ParseInt(values[0], 16, 64)
	if err != nil {
		return nil, fmt.Errorf("run %s: lease %q: %w", id, values[0], err)
	}
	rev, err := strconv.ParseInt(values[1], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("run %s: revision %q: %w", id, values[1], err)
	}
	l, err := f.adopt(clientv3.LeaseID(lid))
	if err != nil {
		return nil, err
	}
	if _, cur, err := f.readActive(id); err != nil || cur != rev {
		l.release()
		return nil, fmt.Errorf("run %s changed before its detached supervisor took it over", id)
	}
	return &run{f: f, id: id, lease: l, rev: rev}, nil
}

// leaseClaim is what an etcd run's command is launched with: the store's
// URL, and a lease that each attempt's guard keeps it from outliving.
type leaseClaim struct{ r *run }

func (c leaseClaim) Files() []*os.File    { return nil }
func (c leaseClaim) Env() string          { return "CREW_STORE=" + c.r.f.Loc.URL }
func (c leaseClaim) Lease() backend.Lease { return c.r.lease }
