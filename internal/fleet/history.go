//go:build etcd

package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
)

// history is the store's finished runs: their final records under
// runs/done/, and an index of them in finish order under finished/, whose
// keys start with the finish time and whose values say what the filters
// need (finishEntry). Both are written in one transaction.
type history struct{ f *Fleet }

// finishStamp is the finish time in an index key: it sorts as it orders.
const finishStamp = "20060102T150405.000000000Z"

// indexed is one entry of the index of finished runs.
type indexed struct {
	key   string
	id    record.RunID
	at    time.Time
	entry finishEntry
	err   error // the key or value is not an index entry's
}

func (f *Fleet) parseIndexed(kv []byte, val []byte) indexed {
	x := indexed{key: string(kv)}
	when, id, _ := strings.Cut(strings.TrimPrefix(x.key, f.k.finishedPrefix()), "/")
	at, err := time.Parse(finishStamp, when)
	if err == nil {
		x.id, err = record.ParseRunID(id)
	}
	if err == nil {
		err = json.Unmarshal(val, &x.entry)
	}
	if err == nil {
		err = x.entry.check()
	}
	x.at, x.err = at, err
	return x
}

// check refuses an entry crew would not have written: every entry is of a
// finished run of a valid task.
func (e finishEntry) check() error {
	switch e.State {
	case record.Succeeded, record.Failed, record.Stopped, record.Interrupted:
	default:
		return fmt.Errorf("not the state of a finished run: %q", e.State)
	}
	return record.ValidateTask(e.Task)
}

// indexPage is the size of one read of the index.
const indexPage = 200

// walkIndex calls fn with the index's entries, newest finish first, a page
// at a time, until fn returns false.
func (f *Fleet) walkIndex(keysOnly bool, fn func(x indexed) bool) error {
	end := clientv3.GetPrefixRangeEnd(f.k.finishedPrefix())
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend),
			clientv3.WithLimit(indexPage)}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		ctx, cancel := f.ctx()
		resp, err := f.cli.Get(ctx, f.k.finishedPrefix(), opts...)
		cancel()
		if err != nil {
			return f.wrap("read the finished runs", err)
		}
		for _, kv := range resp.Kvs {
			if !fn(f.parseIndexed(kv.Key, kv.Value)) {
				return nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		end = string(resp.Kvs[len(resp.Kvs)-1].Key) // exclusive: the next page finished earlier
	}
}

// FinishedRuns reads the index newest first and the records of the entries
// q selects.
func (h history) FinishedRuns(q backend.FinishedQuery) (*backend.Finished, error) {
	f := h.f
	out := &backend.Finished{Runs: []*record.Run{}, IndexPath: f.k.finishedPrefix()}
	var pending []record.RunID
	bad := 0
	flush := func() error {
		runs, problems, err := f.records(pending)
		out.Runs, out.Bad = append(out.Runs, runs...), append(out.Bad, problems...)
		pending = pending[:0]
		return err
	}
	var ferr error
	err := f.walkIndex(false, func(x indexed) bool {
		switch {
		case x.err != nil:
			bad++
			return true
		case !q.Since.IsZero() && x.at.Before(q.Since):
			return false // older ones follow
		case q.Match != nil && !q.Match(x.entry.Task, x.entry.State, x.entry.ExitCode):
			return true
		}
		pending = append(pending, x.id)
		if len(pending) == indexPage {
			ferr = flush()
		}
		return ferr == nil && (q.Limit == 0 || len(out.Runs)+len(pending) < q.Limit)
	})
	if err == nil {
		err = ferr
	}
	if err == nil {
		err = flush()
	}
	if err != nil {
		return nil, err
	}
	if q.Limit > 0 && len(out.Runs) > q.Limit {
		out.Runs = out.Runs[:q.Limit]
	}
	if bad > 0 {
		out.IndexProblem = fmt.Sprintf("%d key(s) under %s are not entries of the index of finished runs; they are skipped", bad, f.k.finishedPrefix())
	}
	return out, nil
}

// txnOps bounds the operations of one transaction crew sends: etcd
// refuses more than --max-txn-ops (128 by default), and nothing crew does
// may scale with the history in one transaction.
const txnOps = 64

// records reads the final records of ids, in order, txnOps at a time.
// A record that is gone (pruned meanwhile) is left out; one that cannot
// be read is a problem.
func (f *Fleet) records(ids []record.RunID) ([]*record.Run, []backend.BadRecord, error) {
	out := make([]*record.Run, 0, len(ids))
	var bad []backend.BadRecord
	for page := range slices.Chunk(ids, txnOps) {
		runs, problems, err := history{f}.recordsPage(page)
		if err != nil {
			return nil, nil, err
		}
		out, bad = append(out, runs...), append(bad, problems...)
	}
	return out, bad, nil
}

// recordsPage reads the final records of ids (at most txnOps) in one
// transaction.
func (h history) recordsPage(ids []record.RunID) ([]*record.Run, []backend.BadRecord, error) {
	f := h.f
	ops := make([]clientv3.Op, len(ids))
	for i, id := range ids {
		ops[i] = clientv3.OpGet(f.k.done(id))
	}
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, nil, f.wrap("read the finished runs", err)
	}
	var out []*record.Run
	var bad []backend.BadRecord
	for i, r := range resp.Responses {
		kvs := r.GetResponseRange().Kvs
		if len(kvs) != 1 {
			continue
		}
		rec, err := decodeRun(kvs[0].Value)
		if err != nil {
			bad = append(bad, backend.BadRecord{Path: f.k.done(ids[i]), Err: err})
			continue
		}
		out = append(out, rec)
	}
	return out, bad, nil
}

// FinishedMatching lists the finished runs whose id match accepts, newest
// finish first.
func (h history) FinishedMatching(match func(record.RunID) bool, limit int) ([]backend.FinishedRef, int, error) {
	var refs []backend.FinishedRef
	total := 0
	err := h.f.walkIndex(false, func(x indexed) bool {
		if x.err == nil && match(x.id) {
			total++
			if limit <= 0 || len(refs) < limit {
				refs = append(refs, backend.FinishedRef{ID: x.id, Task: x.entry.Task, State: x.entry.State})
			}
		}
		return true
	})
	return refs, total, err
}

// IndexedEndOf finds nothing: a run's index entry goes in the same
// transaction as its record, so the index never outlives it.
func (history) IndexedEndOf(record.RunID) (backend.IndexedEnd, bool) {
	return backend.IndexedEnd{}, false
}

// errNoHolds: an etcd store's finished runs cannot be held against a
// prune; a waiter that loses the race reads the run gone (RunGoneError).
var errNoHolds = errors.New("an etcd store does not hold finished runs for waiters")

func (history) HoldLog(record.RunID) (backend.LogHold, error) { return nil, errNoHolds }
