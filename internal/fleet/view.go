//go:build etcd

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// activeRun is one key of the active set.
type activeRun struct {
	id     record.RunID // "" if the key is no run id
	key    string
	rec    *record.Run // nil if unreadable
	err    error       // why rec is nil
	modRev int64
	// owned: the run's owner key exists, so its lease lives.
	owned bool
	// ownerLease is the lease the owner key is attached to.
	ownerLease int64
}

// queued is one ticket, in arrival (creation revision) order.
type queued struct {
	t         *record.Ticket
	createRev int64
	lease     int64 // the waiter's lease
}

// view is the store at one revision: everything admission decides from,
// read in one transaction so that it is one consistent snapshot.
type view struct {
	rev       int64
	cfg       record.Config
	cfgExists bool
	cfgErr    error
	// cfgModRev is the config's modification revision (0: none), and
	// cfgRaw its bytes, for the fence of admission's writes.
	cfgModRev int64
	cfgRaw    []byte
	active    []activeRun
	queue     []queued
	// badTickets are queue keys that are not readable tickets.
	badTickets []badTicket
}

// badTicket is a key of the queue that is no readable ticket.
type badTicket struct {
	key   string
	err   error
	lease int64
}

// maxValueBytes bounds what crew decodes from one key: etcd caps values
// at 1.5 MiB by default, and a record is a few KiB.
const maxValueBytes = 1 << 20

// read takes a snapshot of the config, the active set with its owners,
// and the queue.
func (f *Fleet) read(ctx context.Context) (*view, error) {
	ops := []clientv3.Op{
		clientv3.OpGet(f.k.config()),
		clientv3.OpGet(f.k.activePrefix(), clientv3.WithPrefix()),
		// Not keys-only: etcd 3.5 and later leave a key's lease out of a
		// keys-only answer, and an owner key on no lease proves nothing.
		clientv3.OpGet(f.k.ownerPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(f.k.queuePrefix(), clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
	}
	txn, err := f.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, f.wrap("read the active set", err)
	}
	resp := txn
	v := &view{rev: txn.Header.Revision, cfg: record.DefaultConfig()}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		v.cfgExists, v.cfgModRev, v.cfgRaw = true, kvs[0].ModRevision, kvs[0].Value
		if cfg, err := record.DecodeConfig(kvs[0].Value); err != nil {
			v.cfgErr = &vocab.ConfigError{Path: f.k.config(), Err: err}
		} else {
			v.cfg = cfg
		}
	}
	owners := map[string]int64{} // run id: its owner key's lease
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		if kv.Lease != 0 { // one on no lease is foreign (foreign.go)
			owners[strings.TrimPrefix(string(kv.Key), f.k.ownerPrefix())] = kv.Lease
		}
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		name := strings.TrimPrefix(string(kv.Key), f.k.activePrefix())
		lease, owned := owners[name]
		a := activeRun{key: string(kv.Key), modRev: kv.ModRevision, owned: owned, ownerLease: lease}
		if id, err := record.ParseRunID(name); err == nil {
			a.id = id
		}
		a.rec, a.err = decodeRun(kv.Value)
		if a.err != nil {
			a.err = fmt.Errorf("run record %s: %w", kv.Key, a.err)
		}
		if a.err == nil && a.rec.RunID != a.id {
			a.rec, a.err = nil, fmt.Errorf("run record %s: the record is of run %s, not %s", kv.Key, a.rec.RunID, name)
		}
		if a.err == nil && !a.rec.State.Active() {
			a.rec, a.err = nil, fmt.Errorf("run record %s: a %s record in the active set", kv.Key, a.rec.State)
		}
		v.active = append(v.active, a)
	}
	for _, kv := range resp.Responses[3].GetResponseRange().Kvs {
		t, err := record.DecodeTicket(kv.Value)
		if err == nil && string(kv.Key) != f.k.ticket(t.RunID) {
			err = fmt.Errorf("the ticket is of run %s", t.RunID)
		}
		if err != nil {
			v.badTickets = append(v.badTickets, badTicket{key: string(kv.Key), err: fmt.Errorf("queue ticket %s: %w", kv.Key, err), lease: kv.Lease})
			continue
		}
		v.queue = append(v.queue, queued{t: t, createRev: kv.CreateRevision, lease: kv.Lease})
	}
	return v, nil
}

func decodeRun(b []byte) (*record.Run, error) {
	if len(b) > maxValueBytes {
		return nil, fmt.Errorf("a value of %d bytes, more than a run record's bound of %d", len(b), maxValueBytes)
	}
	return record.DecodeRun(b)
}

// owner is what an active key's owner key says: etcd deletes the key when
// its lease ends, so a missing one is proof that the owner is gone, and
// one that exists on a lease, that its lease lives.
func owner(owned bool) record.Owner {
	if owned {
		return record.Owner{Owner: record.Alive, Supervisor: record.Alive}
	}
	return record.Owner{Owner: record.Dead, Supervisor: record.Dead}
}

// entry is a as the orchestration sees a run of the active set.
func (a activeRun) entry() backend.ActiveEntry {
	return backend.ActiveEntry{ID: a.id, Name: strings.TrimPrefix(a.key, a.key[:strings.LastIndex(a.key, "/")+1]),
		Path: a.key, Rec: a.rec, Err: a.err}
}

// scan is the active set with its owners' liveness.
func (v *view) scan() []backend.ActiveRun {
	out := make([]backend.ActiveRun, 0, len(v.active))
	for _, a := range v.active {
		out = append(out, backend.ActiveRun{ActiveEntry: a.entry(), Owner: owner(a.owned)})
	}
	return out
}

// tickets is the queue, in arrival order, each with its waiter's liveness:
// a ticket is on its waiter's lease, so it exists while the waiter lives;
// one on no lease was written by hand, and has no waiter.
func (v *view) tickets(k keys) []backend.TicketEntry {
	out := make([]backend.TicketEntry, 0, len(v.queue)+len(v.badTickets))
	for _, q := range v.queue {
		out = append(out, backend.TicketEntry{ID: q.t.RunID, Path: k.ticket(q.t.RunID), Ticket: q.t, Waiter: waiterLiveness(q.lease)})
	}
	for _, b := range v.badTickets {
		id, _ := record.ParseRunID(strings.TrimPrefix(b.key, k.queuePrefix()))
		out = append(out, backend.TicketEntry{ID: id, Path: b.key, Err: b.err, Waiter: waiterLiveness(b.lease)})
	}
	return out
}

func waiterLiveness(lease int64) record.Liveness {
	if lease == 0 {
		return record.Dead
	}
	return record.Alive
}

// errFenced is a fenced write whose condition no longer held: the record
// changed, or this process lost the admission mutex.
var errFenced = errors.New("fenced write refused")

// finishEntry is the value of a run's key in the index of finished runs:
// what history's filters need, so that they read only the records they
// show. It is written in the same transaction as the final record, so the
// index is never behind or ahead of the records.
type finishEntry struct {
	Task     string       `json:"task"`
	State    record.State `json:"state"`
	ExitCode *int         `json:"exitCode"`
	// Host ran the run and keeps its log.
	Host string `json:"host,omitempty"`
}

// finalOps write final record r (encoded as b) and its index entry.
func (k keys) finalOps(r *record.Run, b []byte) []clientv3.Op {
	e, _ := json.Marshal(finishEntry{Task: r.Task, State: r.State, ExitCode: r.ExitCode, Host: r.Host})
	return []clientv3.Op{clientv3.OpPut(k.done(r.RunID), string(b)), clientv3.OpPut(k.finished(r), string(e))}
}

// removeLog removes the local log of a finished run that this host ran;
// the log of a run another host ran is that host's.
func (f *Fleet) removeLog(id record.RunID, host string) {
	if f.logs != nil && host == f.host {
		_ = f.logs.RemoveFinished(id) // no local record: just its log
	}
}
