//go:build etcd

package fleet

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// admissionMutex is the admission lock: concurrency.Mutex's algorithm
// (every start puts a key on its lease under the prefix; the key created
// first holds the lock; each other start waits for the deletion of the
// newest key created before its own), except that a key on no lease is
// not waited for. crew writes every key of the mutex on a start's lease,
// so one without was written by hand or copied by etcdctl make-mirror
// (which drops leases): it would never go by itself, and waiting for it
// would block every start of the fleet forever. It is foreign: skipped
// here, shown by crew status, removed by crew recover (foreign.go).
type admissionMutex struct {
	cli   *clientv3.Client
	lease clientv3.LeaseID
	pfx   string
	myKey string
	myRev int64
}

func newAdmissionMutex(cli *clientv3.Client, lease clientv3.LeaseID, pfx string) *admissionMutex {
	return &admissionMutex{cli: cli, lease: lease, pfx: pfx + "/", myRev: -1}
}

// errMutexKeyLost: the start's key went while it waited (its lease
// expired).
var errMutexKeyLost = errors.New("the admission lock's key of this start is gone (its lease expired)")

// Lock takes the mutex, waiting until ctx ends; on an error, the start's
// key is taken back.
func (m *admissionMutex) Lock(ctx context.Context) error {
	if err := m.enter(ctx); err != nil {
		return err
	}
	err := m.waitTurn(ctx)
	if err == nil {
		var resp *clientv3.GetResponse
		if resp, err = m.cli.Get(ctx, m.myKey); err == nil && len(resp.Kvs) == 0 {
			return errMutexKeyLost
		}
	}
	if err != nil {
		_ = m.Unlock(m.cli.Ctx())
	}
	return err
}

// enter puts the start's key in line, or finds it there.
func (m *admissionMutex) enter(ctx context.Context) error {
	m.myKey = fmt.Sprintf("%s%x", m.pfx, m.lease)
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(m.myKey), "=", 0)).
		Then(clientv3.OpPut(m.myKey, "", clientv3.WithLease(m.lease))).
		Else(clientv3.OpGet(m.myKey)).Commit()
	if err != nil {
		return err
	}
	m.myRev = resp.Header.Revision
	if !resp.Succeeded {
		m.myRev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
	}
	return nil
}

// waitTurn waits until no key on a lease created before the start's own
// is left.
func (m *admissionMutex) waitTurn(ctx context.Context) error {
	for {
		key, rev, err := m.ahead(ctx)
		if err != nil || key == "" {
			return err
		}
		if err := m.waitDelete(ctx, key, rev); err != nil {
			return err
		}
	}
}

// ahead is the newest key on a lease created before the start's own ("" if
// none), and the revision it was seen at; keys on no lease are passed
// over, a page at a time. (Not keys-only: etcd 3.5 and later leave a key's
// lease out of a keys-only answer; the mutex's values are empty anyway.)
func (m *admissionMutex) ahead(ctx context.Context) (string, int64, error) {
	maxRev := m.myRev - 1
	for maxRev > 0 {
		resp, err := m.cli.Get(ctx, m.pfx, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(maxRev),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(txnOps))
		if err != nil {
			return "", 0, err
		}
		for _, kv := range resp.Kvs {
			if kv.Lease != 0 {
				return string(kv.Key), resp.Header.Revision, nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		maxRev = resp.Kvs[len(resp.Kvs)-1].CreateRevision - 1
	}
	return "", 0, nil
}

// waitDelete waits for key, seen at revision rev, to be deleted.
func (m *admissionMutex) waitDelete(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wr clientv3.WatchResponse
	for wr = range m.cli.Watch(wctx, key, clientv3.WithRev(rev)) {
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
	}
	if err := wr.Err(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("lost the watch while waiting for the admission lock")
}

// Unlock deletes the start's key.
func (m *admissionMutex) Unlock(ctx context.Context) error {
	if m.myRev <= 0 {
		return nil
	}
	if _, err := m.cli.Delete(ctx, m.myKey); err != nil {
		return err
	}
	m.myRev = -1
	return nil
}

// IsOwner is the fence of the section's writes: the start's key is still
// the one it locked with.
func (m *admissionMutex) IsOwner() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(m.myKey), "=", m.myRev)
}

// Key is the start's key under the prefix.
func (m *admissionMutex) Key() string { return m.myKey }
