//go:build etcd

package fleet

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/retention"
	"github.com/crew-dev/crew/internal/vocab"
)

// ByFinish walks the index of finished runs, newest finish first: the
// index is written with every final record, so it lists them all. An
// entry counts only if it is as crew writes it: its key and value parse,
// and its run's record is there and finished when the key says. Anything
// else under finished/ is junk, reported and never counted, so that it
// cannot make crew prune --keep N remove a run it should keep.
func (h history) ByFinish() ([]retention.Run, []string, error) {
	f := h.f
	var runs []retention.Run
	var problems []string
	var page []indexed
	confirm := func() error {
		ok, bad, err := h.confirm(page)
		for _, x := range ok {
			runs = append(runs, retention.Run{ID: x.id, Task: x.entry.Task, Finished: x.at, Path: f.k.done(x.id)})
		}
		problems = append(problems, bad...)
		page = page[:0]
		return err
	}
	var cerr error
	err := f.walkIndex(false, func(x indexed) bool {
		if x.err != nil {
			problems = append(problems, fmt.Sprintf("%s: not an entry of the index of finished runs (%v); left alone", x.key, x.err))
			return true
		}
		if page = append(page, x); len(page) == txnOps {
			cerr = confirm()
		}
		return cerr == nil
	})
	if err == nil {
		err = cmp.Or(cerr, confirm())
	}
	return runs, problems, err
}

// confirm reads the records of index entries xs (at most txnOps) and
// returns those whose record says what the entry does, and a problem for
// each of the others.
func (h history) confirm(xs []indexed) ([]indexed, []string, error) {
	f := h.f
	if len(xs) == 0 {
		return nil, nil, nil
	}
	ids := make([]record.RunID, len(xs))
	for i, x := range xs {
		ids[i] = x.id
	}
	recs, _, err := h.recordsPage(ids)
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[record.RunID]*record.Run, len(recs))
	for _, r := range recs {
		byID[r.RunID] = r
	}
	var ok []indexed
	var bad []string
	for _, x := range xs {
		if r := byID[x.id]; r != nil && r.FinishedAt != nil && f.k.finished(r) == x.key {
			ok = append(ok, x)
			continue
		}
		bad = append(bad, fmt.Sprintf("%s: not an entry of the index of finished runs (no record of run %s that finished then); left alone", x.key, x.id))
	}
	return ok, bad, nil
}

// Remove removes a finished run's record and index entry in one
// transaction, and its log if this host ran it.
func (h history) Remove(id record.RunID, dry bool) (int64, error) {
	f := h.f
	ctx, cancel := f.ctx()
	defer cancel()
	if dry {
		resp, err := f.cli.Get(ctx, f.k.done(id))
		if err != nil || len(resp.Kvs) == 0 {
			return 0, f.wrap("read run "+string(id), err)
		}
		return int64(len(resp.Kvs[0].Value)), nil
	}
	resp, err := f.cli.Get(ctx, f.k.done(id))
	if err != nil {
		return 0, f.wrap("read run "+string(id), err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil // removed by someone else meanwhile
	}
	kv := resp.Kvs[0]
	ops := []clientv3.Op{clientv3.OpDelete(f.k.done(id))}
	rec, derr := decodeRun(kv.Value)
	if derr == nil {
		ops = append(ops, clientv3.OpDelete(f.k.finished(rec)))
	}
	_, err = f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(f.k.done(id)), "=", kv.ModRevision)).Then(ops...).Commit()
	if err != nil {
		return 0, f.wrap("remove run "+string(id), err)
	}
	if derr == nil {
		f.removeLog(id, rec.Host)
	}
	return int64(len(kv.Value)), nil
}

// AfterPrune has nothing to tidy: record and index entry go together.
func (history) AfterPrune([]record.RunID) {}

// lazyPruneMax bounds the finished runs one finishing run removes: the
// cost of a finish stays flat, and crew prune does the rest.
const lazyPruneMax = 8

// PruneLazily removes up to lazyPruneMax of the oldest finished runs that
// p lets go, from the index's oldest end. Junk in the index is skipped and
// never counted: the count of keys under finished/ only says when no run
// can be removable by count (too few keys); a run is removed by count only
// once KeepNewest entries as crew writes them (confirmed against their
// records) are seen to have finished after it, read from the newest end:
// bounded by KeepNewest, not by the history.
func (h history) PruneLazily(p retention.Policy, now time.Time) error {
	f := h.f
	ctx, cancel := f.ctx()
	defer cancel()
	count, err := f.cli.Get(ctx, f.k.finishedPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return f.wrap("count the finished runs", err)
	}
	resp, err := f.cli.Get(ctx, f.k.finishedPrefix(), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(lazyPruneMax))
	if err != nil {
		return f.wrap("read the finished runs", err)
	}
	line := countLine{f: f, keep: p.KeepNewest}
	for i, kv := range resp.Kvs {
		x := f.parseIndexed(kv.Key, kv.Value)
		if x.err != nil {
			continue // junk: neither removed nor counted
		}
		byCount := false
		if p.KeepNewest >= 0 && count.Count-int64(i)-1 >= int64(p.KeepNewest) { // there may be KeepNewest after it
			if byCount, err = line.before(x.key); err != nil {
				return err
			}
		}
		if !p.Lets(x.at, byCount, now) {
			return nil // oldest first: the rest are kept too
		}
		if _, err := h.Remove(x.id, false); err != nil {
			return err
		}
	}
	return nil
}

// countLine is the key of the keep-th newest entry of the index that is
// as crew writes it (ByFinish's rule): a run whose key sorts before it has
// keep finishes after it.
type countLine struct {
	f    *Fleet
	keep int
	read bool
	key  string // "" if there are fewer than keep entries
}

// before reports whether key sorts before the line, reading the line from
// the index's newest end the first time.
func (l *countLine) before(key string) (bool, error) {
	if l.keep == 0 {
		return true, nil
	}
	if !l.read {
		if err := l.find(); err != nil {
			return false, err
		}
		l.read = true
	}
	return l.key != "" && key < l.key, nil
}

// find walks the index from its newest end, confirming entries a page at
// a time, until the keep-th.
func (l *countLine) find() error {
	seen := 0
	var page []indexed
	count := func() error {
		ok, _, err := history{l.f}.confirm(page)
		for _, x := range ok {
			if seen++; seen == l.keep {
				l.key = x.key
			}
		}
		page = page[:0]
		return err
	}
	var cerr error
	err := l.f.walkIndex(false, func(x indexed) bool {
		if x.err != nil {
			return true
		}
		if page = append(page, x); len(page) == min(txnOps, l.keep-seen) {
			cerr = count()
		}
		return cerr == nil && seen < l.keep
	})
	if err == nil && cerr == nil && seen < l.keep {
		err = count()
	}
	return cmp.Or(err, cerr)
}

// Prepare has nothing to make: keys need no directories.
func (f *Fleet) Prepare(bool) (bool, error) { return true, nil }

// Quarantine moves an unreadable active record under quarantine/, fenced
// by its revision and its owner key's being on no lease.
func (f *Fleet) Quarantine(e backend.ActiveEntry, _ time.Time, _ string) (backend.ReapOutcome, string, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	get, err := f.cli.Get(ctx, e.Path)
	if err != nil {
		return 0, "", f.wrap("read "+e.Path, err)
	}
	if len(get.Kvs) == 0 {
		return backend.AlreadyDone, "", nil
	}
	dest := f.k.quarantinePrefix() + strings.TrimPrefix(e.Path, f.k.p+"/")
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(e.Path), "=", get.Kvs[0].ModRevision)}
	if e.ID != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.LeaseValue(f.k.owner(e.ID)), "=", 0)) // absent, or foreign
	}
	resp, err := f.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(dest, string(get.Kvs[0].Value)), clientv3.OpDelete(e.Path)).Commit()
	switch {
	case err != nil:
		return 0, "", f.wrap("quarantine "+e.Path, err)
	case !resp.Succeeded:
		return backend.OwnerBusy, "", nil
	}
	return backend.Reaped, dest, nil
}

// Sweep removes stop requests of runs that are neither active nor waiting
// any more (their crew stop outlived them), each fenced by the run's
// absence, and the foreign keys (foreign.go): nothing else outlives a
// crash on etcd (what a process holds is on its lease).
func (f *Fleet) Sweep(o backend.UpkeepOptions) []vocab.RecoverItem {
	return append(f.sweepStops(o), foreign{f}.sweep(o)...)
}

// sweepStops removes the stop requests of runs that are neither active nor
// waiting.
func (f *Fleet) sweepStops(o backend.UpkeepOptions) []vocab.RecoverItem {
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Get(ctx, f.k.stopPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return []vocab.RecoverItem{{Path: f.k.stopPrefix(), Outcome: vocab.FailedItem, Reason: f.wrap("list the stop requests", err).Error()}}
	}
	var items []vocab.RecoverItem
	for _, kv := range resp.Kvs {
		id := record.RunID(strings.TrimPrefix(string(kv.Key), f.k.stopPrefix()))
		it := vocab.RecoverItem{RunID: string(id), Path: string(kv.Key), Outcome: vocab.Cleaned,
			Reason: "a stop request of a run that is no longer active or waiting"}
		txn := f.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(f.k.active(id)), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(f.k.ticket(id)), "=", 0))
		if o.DryRun {
			txn = txn.Then() // only ask
			it.Reason = "would remove: " + it.Reason
		} else {
			txn = txn.Then(clientv3.OpDelete(string(kv.Key)))
		}
		tresp, err := txn.Commit()
		switch {
		case err != nil:
			it.Outcome, it.Reason = vocab.FailedItem, f.wrap("remove "+string(kv.Key), err).Error()
		case !tresp.Succeeded:
			continue // its run is active or waiting
		}
		items = append(items, it)
	}
	return items
}

// Reindex has nothing to do: the index of finished runs is written in the
// same transaction as the records.
func (f *Fleet) Reindex(backend.UpkeepOptions) []vocab.RecoverItem { return nil }
