//go:build etcd

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/admission"
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
	active    []activeRun
	queue     []queued
	// badTickets are queue keys that are not readable tickets.
	badTickets []string
}

// maxValueBytes bounds what crew decodes from one key: etcd caps values
// at 1.5 MiB by default, and a record is a few KiB.
const maxValueBytes = 1 << 20

// read takes a snapshot of the config, the active set with its owners,
// and the queue.
func (f *Fleet) read(ctx context.Context, writes ...clientv3.Op) (*view, error) {
	// Writes that go with the read (the admission lock's holder note)
	// share its round trip; they come first, the four reads after.
	ops := append(writes,
		clientv3.OpGet(f.k.config()),
		clientv3.OpGet(f.k.activePrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(f.k.ownerPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(f.k.queuePrefix(), clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
	)
	txn, err := f.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, f.wrap("read the active set", err)
	}
	resp := struct{ Responses []*etcdserverpb.ResponseOp }{txn.Responses[len(writes):]}
	v := &view{rev: txn.Header.Revision, cfg: record.DefaultConfig()}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		v.cfgExists = true
		if cfg, err := record.DecodeConfig(kvs[0].Value); err != nil {
			v.cfgErr = &vocab.ConfigError{Path: f.k.config(), Err: err}
		} else {
			v.cfg = cfg
		}
	}
	owners := map[string]int64{} // run id: its owner key's lease
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		owners[strings.TrimPrefix(string(kv.Key), f.k.ownerPrefix())] = kv.Lease
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		name := strings.TrimPrefix(string(kv.Key), f.k.activePrefix())
		lease, owned := owners[name]
		a := activeRun{key: string(kv.Key), modRev: kv.ModRevision, owned: owned, ownerLease: lease}
		if id, err := record.ParseRunID(name); err == nil {
			a.id = id
		}
		a.rec, a.err = decodeRun(kv.Value)
		if a.err == nil && a.rec.RunID != a.id {
			a.rec, a.err = nil, fmt.Errorf("the record is of run %s, not %s", a.rec.RunID, name)
		}
		if a.err == nil && !a.rec.State.Active() {
			a.rec, a.err = nil, fmt.Errorf("a %s record in the active set", a.rec.State)
		}
		v.active = append(v.active, a)
	}
	for _, kv := range resp.Responses[3].GetResponseRange().Kvs {
		t, err := record.DecodeTicket(kv.Value)
		if err != nil || string(kv.Key) != f.k.ticket(t.RunID) {
			v.badTickets = append(v.badTickets, string(kv.Key))
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

// runs is the active set as admission sees it. An owner key that exists
// means a living lease; etcd deletes it when the lease ends, so a missing
// one is proof the owner is gone.
func (v *view) runs() []admission.Run {
	out := make([]admission.Run, 0, len(v.active))
	for _, a := range v.active {
		l := record.Dead
		if a.owned {
			l = record.Alive
		}
		out = append(out, admission.Run{ID: a.id, Rec: a.rec, Owner: record.Owner{Owner: l, Supervisor: l}})
	}
	return out
}

func (v *view) usage() admission.Usage { return admission.Count(v.runs()) }

// tickets is the queue for admission.Decide and Plan.
func (v *view) tickets() []admission.Ticket {
	out := make([]admission.Ticket, 0, len(v.queue))
	for _, q := range v.queue {
		out = append(out, admission.Ticket{ID: q.t.RunID, Task: q.t.Task, Pool: q.t.Pool, Since: q.t.CreatedAt})
	}
	return out
}

// warnings are problems in the active set that admission steps around.
func (v *view) warnings() []error {
	var w []error
	for _, a := range v.active {
		if a.rec == nil {
			hold := "holds no slot (its owner is gone); `crew recover` sets it aside"
			if a.owned {
				hold = "holds a slot while its owner's lease lives"
			}
			w = append(w, fmt.Errorf("unreadable record %s (%w): %s", a.key, a.err, hold))
		}
	}
	return w
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
func (f *Fleet) finalOps(r *record.Run, b []byte) []clientv3.Op {
	e, _ := json.Marshal(finishEntry{Task: r.Task, State: r.State, ExitCode: r.ExitCode, Host: r.Host})
	return []clientv3.Op{clientv3.OpPut(f.k.done(r.RunID), string(b)), clientv3.OpPut(f.k.finished(r), string(e))}
}

// holds reports whether key holds exactly b now, and at which revision:
// how a writer whose answer was lost learns that its write went in.
func (f *Fleet) holds(key string, b []byte) (int64, bool) {
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != string(b) {
		return 0, false
	}
	return resp.Kvs[0].ModRevision, true
}

// removeLog removes the local log of a finished run that this host ran;
// the log of a run another host ran is that host's.
func (f *Fleet) removeLog(id record.RunID, host string) {
	if f.Logs != nil && host == f.Host {
		_ = f.Logs.RemoveFinished(id) // no local record: just its log
	}
}
