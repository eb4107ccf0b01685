//go:build etcd

package fleet

import (
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/vocab"
)

// leasedPrefixes are where crew writes every key on a lease (queue
// tickets, owner keys; and an earlier release, its admission mutex's
// keys), so that each goes with the process that wrote it.
func (k keys) leasedPrefixes() []string {
	return []string{k.admissionLock() + "/", k.queuePrefix(), k.ownerPrefix()}
}

// foreignKey is a key on no lease under a leased prefix: written by hand,
// or copied by etcdctl make-mirror (which drops leases). Nothing would
// ever remove it, so crew does not wait for it, count it, or take it for a
// living process: it is skipped, shown, and removed by crew recover.
type foreignKey struct {
	key    string
	modRev int64
}

// foreign finds and removes the foreign keys of a store.
type foreign struct{ f *Fleet }

const foreignWhy = "a key on no lease: crew writes every key here on a lease, so this one is not crew's " +
	"(written by hand, or copied by etcdctl make-mirror, which drops leases)"

// keys lists the keys on no lease under the leased prefixes, a page
// at a time. (Not keys-only: etcd 3.5 and later leave a key's lease out of
// a keys-only answer.)
func (fo foreign) keys() ([]foreignKey, error) {
	f := fo.f
	var out []foreignKey
	for _, p := range f.k.leasedPrefixes() {
		from, end := p, clientv3.GetPrefixRangeEnd(p)
		for {
			ctx, cancel := f.ctx()
			resp, err := f.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(indexPage))
			cancel()
			if err != nil {
				return nil, f.wrap("read "+p, err)
			}
			for _, kv := range resp.Kvs {
				if kv.Lease == 0 {
					out = append(out, foreignKey{key: string(kv.Key), modRev: kv.ModRevision})
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	return out, nil
}

// Foreign is what crew status shows of the foreign keys.
func (f *Fleet) Foreign() ([]vocab.Problem, error) {
	keys, err := foreign{f}.keys()
	if err != nil {
		return nil, err
	}
	out := make([]vocab.Problem, 0, len(keys))
	for _, k := range keys {
		out = append(out, vocab.Problem{Path: k.key, Error: k.key + ": " + foreignWhy + "; crew skips it, and crew recover removes it"})
	}
	return out, nil
}

// sweep removes the foreign keys, each fenced by its revision and
// its being on no lease still (crew recover).
func (fo foreign) sweep(o backend.UpkeepOptions) []vocab.RecoverItem {
	f := fo.f
	keys, err := fo.keys()
	if err != nil {
		return []vocab.RecoverItem{{Path: f.k.p + "/", Outcome: vocab.FailedItem, Reason: fmt.Sprintf("list the keys on no lease: %v", err)}}
	}
	var items []vocab.RecoverItem
	for _, k := range keys {
		it := vocab.RecoverItem{Path: k.key, Outcome: vocab.Cleaned, Reason: "removed " + foreignWhy}
		if o.DryRun {
			it.Reason = "would remove " + foreignWhy
			items = append(items, it)
			continue
		}
		ctx, cancel := f.ctx()
		resp, err := f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k.key), "=", k.modRev),
			clientv3.Compare(clientv3.LeaseValue(k.key), "=", 0)).Then(clientv3.OpDelete(k.key)).Commit()
		cancel()
		switch {
		case err != nil:
			it.Outcome, it.Reason = vocab.FailedItem, f.wrap("remove "+k.key, err).Error()
		case !resp.Succeeded:
			continue // changed or gone meanwhile
		}
		items = append(items, it)
	}
	return items
}
