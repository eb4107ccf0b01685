//go:build etcd

package fleet

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/recovery"
	"github.com/crew-dev/crew/internal/vocab"
)

// Init writes the fleet's config: the same meaning as crew init on a state
// root. The write is a compare-and-swap on the config key's revision, so
// two concurrent inits never lose one's change.
func (f *Fleet) Init(maxInProgress int, setMax bool, pools []vocab.PoolChange, changes ...vocab.ConfigChange) (*vocab.InitResult, error) {
	if err := dispatch.CheckInit(maxInProgress, setMax, pools); err != nil {
		return nil, err
	}
	if err := dispatch.CheckChanges(changes...); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		res, done, err := f.initOnce(maxInProgress, setMax, pools, changes)
		if err != nil || done {
			return res, err
		}
		if attempt == 10 {
			return nil, fmt.Errorf("etcd store %s: the config kept changing under crew init; try again", f.Loc.URL)
		}
	}
}

func (f *Fleet) initOnce(maxInProgress int, setMax bool, pools []vocab.PoolChange, changes []vocab.ConfigChange) (*vocab.InitResult, bool, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	key := f.k.config()
	resp, err := f.cli.Get(ctx, key)
	if err != nil {
		return nil, false, f.wrap("read the config", err)
	}
	cfg, rev, exists := record.DefaultConfig(), int64(0), len(resp.Kvs) == 1
	res := &vocab.InitResult{Path: key}
	var ops []clientv3.Op
	if exists {
		rev = resp.Kvs[0].ModRevision
		c, derr := record.DecodeConfig(resp.Kvs[0].Value)
		switch {
		case derr != nil && !setMax:
			return nil, false, fmt.Errorf("%s: %w; set it anew with `crew init --max N`", key, derr)
		case derr != nil:
			res.Broken = derr.Error()
			res.MovedAside = fmt.Sprintf("%s.unusable.%s", key, f.now().Format("20060102T150405Z"))
			ops = append(ops, clientv3.OpPut(res.MovedAside, string(resp.Kvs[0].Value)))
		default:
			cfg, res.Existed, res.Old = c, true, c.MaximumInProgress
		}
	}
	if setMax {
		cfg.MaximumInProgress = maxInProgress
	}
	cfg.Pools = dispatch.ApplyPools(cfg.Pools, pools)
	for _, c := range changes {
		c(&cfg)
	}
	res.New, res.Pools, res.Config = cfg.MaximumInProgress, cfg.Pools, cfg
	if res.Existed && !setMax && len(pools) == 0 && len(changes) == 0 {
		return res, true, nil
	}
	b, err := cfg.Encode()
	if err != nil {
		return nil, false, err
	}
	ops = append(ops, clientv3.OpPut(key, string(b)))
	tresp, err := f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(ops...).Commit()
	if err != nil {
		return nil, false, f.wrap("write the config", err)
	}
	return res, tresp.Succeeded, nil
}

// Status is crew status on the fleet: read without the admission lock, in
// one consistent snapshot.
func (f *Fleet) Status(taskFilter string) (*vocab.Snapshot, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	v, err := f.read(ctx)
	if err != nil {
		return nil, err
	}
	u := v.usage()
	snap := &vocab.Snapshot{
		Version: vocab.StatusVersion, Root: f.Loc.URL, ConfigPath: f.k.config(), ConfigExists: v.cfgExists,
		MaximumInProgress: v.cfg.MaximumInProgress, SlotsInUse: u.InUse,
		Active: []vocab.RunView{}, Finished: []vocab.RunView{}, Problems: []vocab.Problem{},
		Queue: []vocab.QueueView{}, Pools: []vocab.PoolView{},
		Retention: dispatch.RetentionOf(v.cfg), LogMax: v.cfg.LogMax,
	}
	if v.cfgErr != nil {
		snap.MaximumInProgress = 0
		snap.ConfigError = &vocab.ConfigProblem{Path: f.k.config(), Error: v.cfgErr.Error()}
	}
	for _, a := range v.active {
		if a.rec == nil {
			snap.Problems = append(snap.Problems, vocab.Problem{Path: a.key, Error: a.err.Error(), OwnerAlive: a.owned, HoldsSlot: a.owned})
			continue
		}
		if taskFilter != "" && a.rec.Task != taskFilter {
			continue
		}
		snap.Active = append(snap.Active, liveView(a))
	}
	plan := admission.Plan(v.cfg, u, v.tickets())
	for i, q := range v.queue {
		if taskFilter != "" && q.t.Task != taskFilter {
			continue
		}
		snap.Queue = append(snap.Queue, vocab.QueueView{Position: i + 1, Task: q.t.Task, RunID: q.t.RunID,
			Since: q.t.CreatedAt, Pool: q.t.Pool, WaitingFor: plan[i].Reason, Host: q.t.Host})
	}
	for _, name := range v.cfg.PoolNames() {
		snap.Pools = append(snap.Pools, vocab.PoolView{Name: name, MaximumInProgress: v.cfg.Pools[name], InUse: u.PoolUse[name]})
	}
	if snap.Finished, err = f.finished(taskFilter, vocab.FinishedShown); err != nil {
		return nil, err
	}
	return snap, nil
}

func liveView(a activeRun) vocab.RunView {
	l := record.Dead
	if a.owned {
		l = record.Alive
	}
	return vocab.RunView{Run: *a.rec, Owner: l.String(), OwnerAlive: a.owned, SupervisorAlive: a.owned,
		HoldsSlot: a.owned && a.rec.State.Active()}
}

// finished lists the newest finishes, at most n, of taskFilter if set.
func (f *Fleet) finished(taskFilter string, n int) ([]vocab.RunView, error) {
	return f.finishedWhere(n, time.Time{}, func(e finishEntry) bool { return taskFilter == "" || e.Task == taskFilter })
}

// finishedWhere reads the index of finished runs newest finish first, a
// page at a time, and the records of the entries that match (at most n;
// 0: all) and finished at or after since.
func (f *Fleet) finishedWhere(n int, since time.Time, match func(finishEntry) bool) ([]vocab.RunView, error) {
	out := []vocab.RunView{}
	end := clientv3.GetPrefixRangeEnd(f.k.finishedPrefix())
	const page = 200
	for n == 0 || len(out) < n {
		ctx, cancel := f.ctx()
		resp, err := f.cli.Get(ctx, f.k.finishedPrefix(), clientv3.WithRange(end),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(page))
		cancel()
		if err != nil {
			return nil, f.wrap("read the finished runs", err)
		}
		var ids []record.RunID
		for _, kv := range resp.Kvs {
			key := string(kv.Key)
			when, id, _ := strings.Cut(strings.TrimPrefix(key, f.k.finishedPrefix()), "/")
			if !since.IsZero() {
				if t, err := time.Parse("20060102T150405.000000000Z", when); err == nil && t.Before(since) {
					resp.More = false // older ones follow
					break
				}
			}
			var e finishEntry
			if json.Unmarshal(kv.Value, &e) != nil || !match(e) {
				continue
			}
			ids = append(ids, record.RunID(id))
		}
		runs, err := f.records(ids)
		if err != nil {
			return nil, err
		}
		for _, r := range runs {
			out = append(out, vocab.RunView{Run: *r, Owner: record.Dead.String()})
			if n > 0 && len(out) == n {
				break
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		end = string(resp.Kvs[len(resp.Kvs)-1].Key) // exclusive: the next page finished earlier
	}
	return out, nil
}

// records reads the final records of ids, in order, in one transaction;
// a record that is gone (pruned meanwhile) or unreadable is left out.
func (f *Fleet) records(ids []record.RunID) ([]*record.Run, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ops := make([]clientv3.Op, len(ids))
	for i, id := range ids {
		ops[i] = clientv3.OpGet(f.k.done(id))
	}
	ctx, cancel := f.ctx()
	defer cancel()
	resp, err := f.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, f.wrap("read the finished runs", err)
	}
	out := make([]*record.Run, 0, len(ids))
	for _, r := range resp.Responses {
		if kvs := r.GetResponseRange().Kvs; len(kvs) == 1 {
			if rec, err := decodeRun(kvs[0].Value); err == nil {
				out = append(out, rec)
			}
		}
	}
	return out, nil
}

// History is crew history on the fleet: finished runs, newest finish
// first, read from the index of finished runs.
func (f *Fleet) History(q vocab.HistoryQuery) (*vocab.History, error) {
	runs, err := f.finishedWhere(q.Limit, q.Since, func(e finishEntry) bool {
		return (q.Task == "" || e.Task == q.Task) && (!q.Failed || e.State != record.Succeeded)
	})
	if err != nil {
		return nil, err
	}
	return &vocab.History{Version: vocab.HistoryVersion, Runs: runs, Problems: []vocab.Problem{}}, nil
}

// Prune removes finished runs the policy lets go, newest kept first: a
// run goes only when every rule given lets it go. Active and waiting runs
// are never touched.
func (f *Fleet) Prune(opts recovery.PruneOptions) (*recovery.PruneReport, error) {
	rep := &recovery.PruneReport{Version: recovery.PruneVersion, DryRun: opts.DryRun, Removed: []recovery.PrunedRun{}, Errors: []string{}}
	now := opts.Now
	if now.IsZero() {
		now = f.now()
	}
	p := opts.Policy
	if p.KeepsEverything() {
		return rep, nil
	}
	ctx, cancel := f.ctx()
	resp, err := f.cli.Get(ctx, f.k.finishedPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	cancel()
	if err != nil {
		return nil, f.wrap("read the finished runs", err)
	}
	for i, kv := range resp.Kvs {
		key := string(kv.Key)
		when, id, _ := strings.Cut(strings.TrimPrefix(key, f.k.finishedPrefix()), "/")
		at, err := time.Parse("20060102T150405.000000000Z", when)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: not an index entry of a finished run", key))
			continue
		}
		keep := (p.KeepNewest >= 0 && i < p.KeepNewest) || (p.OlderThan >= 0 && now.Sub(at) < p.OlderThan)
		if keep {
			rep.Kept++
			continue
		}
		pr := recovery.PrunedRun{RunID: record.RunID(id), FinishedAt: &at, Path: f.k.done(record.RunID(id))}
		if !opts.DryRun {
			dctx, dcancel := f.ctx()
			d, err := f.cli.Txn(dctx).Then(clientv3.OpDelete(f.k.done(record.RunID(id)), clientv3.WithPrevKV()), clientv3.OpDelete(key)).Commit()
			dcancel()
			if err != nil {
				rep.Errors = append(rep.Errors, f.wrap("remove run "+id, err).Error())
				continue
			}
			if prev := d.Responses[0].GetResponseDeleteRange().PrevKvs; len(prev) == 1 {
				pr.Bytes = int64(len(prev[0].Value))
				if r, err := decodeRun(prev[0].Value); err == nil {
					pr.Task = r.Task
					f.removeLog(r.RunID, r.Host)
				}
			}
		}
		rep.Removed = append(rep.Removed, pr)
	}
	return rep, nil
}

// Recover finalizes every active run whose owner's lease is gone and sets
// aside unreadable records that hold no slot. It is idempotent and safe
// beside admissions and other recovers: each write is fenced by the
// record's revision and the owner key's absence.
func (f *Fleet) Recover(opts recovery.Options) (*recovery.Report, error) {
	rep := &recovery.Report{Version: recovery.ReportVersion, DryRun: opts.DryRun, Items: []recovery.Item{}}
	ctx, cancel := f.ctx()
	v, err := f.read(ctx)
	cancel()
	if err != nil {
		return nil, err
	}
	var deadline time.Time
	if opts.Timeout > 0 {
		deadline = time.Now().Add(opts.Timeout)
	}
	for _, a := range v.active {
		it := recovery.Item{RunID: string(a.id), Path: a.key}
		if a.rec != nil {
			it.Task = a.rec.Task
		}
		switch {
		case !deadline.IsZero() && time.Now().After(deadline):
			it.Outcome, it.Reason = recovery.FailedItem, fmt.Sprintf("not reached within --timeout %s", opts.Timeout)
		case a.owned && a.rec != nil:
			it.Outcome, it.Reason = recovery.Alive, fmt.Sprintf("its owner's lease lives (crew process %d on host %s)", a.rec.SupervisorPID, a.rec.Host)
		case a.owned:
			it.Outcome, it.Reason = recovery.Alive, fmt.Sprintf("unreadable (%v), but its owner's lease lives: left alone", a.err)
		case a.rec == nil:
			it.Outcome, it.Reason = recovery.Quarantined, fmt.Sprintf("unreadable (%v): moved to %s", a.err, f.quarantineKey(a.key))
			if !opts.DryRun {
				if err := f.quarantine(a); err != nil {
					it.Outcome, it.Reason = recovery.FailedItem, err.Error()
				}
			}
		default:
			it.Outcome = recovery.Finalized
			it.Reason = fmt.Sprintf("owner crew process %d on host %s lost its lease: recorded as interrupted", a.rec.SupervisorPID, a.rec.Host)
			if !opts.DryRun {
				r, err := f.finalizeDead(a)
				switch {
				case err == errFenced:
					it.Outcome, it.Reason = recovery.Alive, "changed while recovery looked at it (finalized by another process, or its owner came back): left alone"
				case err != nil:
					it.Outcome, it.Reason = recovery.FailedItem, err.Error()
				default:
					it.Reason = r.Reason
				}
			}
		}
		rep.Items = append(rep.Items, it)
	}
	rep.Items = append(rep.Items, f.sweepStops(v, opts.DryRun)...)
	return rep, nil
}

// sweepStops removes stop requests of runs that are neither active nor
// waiting any more (their crew stop outlived them).
func (f *Fleet) sweepStops(v *view, dryRun bool) []recovery.Item {
	ctx, cancel := f.ctx()
	defer cancel()
	ids, err := f.stopsOf(ctx)
	if err != nil {
		return []recovery.Item{{Path: f.k.stopPrefix(), Outcome: recovery.FailedItem, Reason: err.Error()}}
	}
	live := map[record.RunID]bool{}
	for _, a := range v.active {
		live[a.id] = true
	}
	for _, q := range v.queue {
		live[q.t.RunID] = true
	}
	var items []recovery.Item
	for _, id := range ids {
		if live[id] {
			continue
		}
		it := recovery.Item{RunID: string(id), Path: f.k.stop(id), Outcome: recovery.Cleaned,
			Reason: "a stop request of a run that is no longer active or waiting"}
		if !dryRun {
			// Fenced: the run must still be neither active nor waiting.
			_, err := f.cli.Txn(ctx).If(
				clientv3.Compare(clientv3.CreateRevision(f.k.active(id)), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(f.k.ticket(id)), "=", 0),
			).Then(clientv3.OpDelete(f.k.stop(id))).Commit()
			if err != nil {
				it.Outcome, it.Reason = recovery.FailedItem, f.wrap("remove "+f.k.stop(id), err).Error()
			}
		}
		items = append(items, it)
	}
	return items
}

func (f *Fleet) quarantineKey(key string) string {
	return f.k.quarantinePrefix() + strings.TrimPrefix(key, f.k.p+"/")
}

// quarantine moves an unreadable active record aside, fenced by its
// revision.
func (f *Fleet) quarantine(a activeRun) error {
	ctx, cancel := f.ctx()
	defer cancel()
	get, err := f.cli.Get(ctx, a.key)
	if err != nil {
		return f.wrap("read "+a.key, err)
	}
	if len(get.Kvs) == 0 || get.Kvs[0].ModRevision != a.modRev {
		return nil
	}
	_, err = f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(a.key), "=", a.modRev)).
		Then(clientv3.OpPut(f.quarantineKey(a.key), string(get.Kvs[0].Value)), clientv3.OpDelete(a.key)).Commit()
	return f.wrap("quarantine "+a.key, err)
}

// lazyPruneMax bounds the finished runs one finishing run removes under
// the configured retention: the cost of a finish stays flat, and crew
// prune does the rest.
const lazyPruneMax = 8

// pruneLazily removes up to lazyPruneMax of the oldest finished runs that
// the configured retention (crew init --retain, --retain-for) lets go, from the finish-order index's oldest
// end: two range reads and a transaction per removed run, whatever the
// history's size.
func (f *Fleet) pruneLazily() {
	ctx, cancel := f.ctx()
	defer cancel()
	got, err := f.cli.Get(ctx, f.k.config())
	if err != nil || len(got.Kvs) == 0 {
		return
	}
	cfg, err := record.DecodeConfig(got.Kvs[0].Value)
	if err != nil {
		return
	}
	p := recovery.PolicyOf(cfg)
	if p.KeepsEverything() {
		return
	}
	count, err := f.cli.Get(ctx, f.k.finishedPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return
	}
	resp, err := f.cli.Get(ctx, f.k.finishedPrefix(), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(lazyPruneMax))
	if err != nil {
		return
	}
	now := f.now()
	for i, kv := range resp.Kvs {
		key := string(kv.Key)
		when, id, _ := strings.Cut(strings.TrimPrefix(key, f.k.finishedPrefix()), "/")
		at, err := time.Parse("20060102T150405.000000000Z", when)
		newer := count.Count - int64(i) - 1 // finished after this one
		if err != nil || (p.KeepNewest >= 0 && newer < int64(p.KeepNewest)) || (p.OlderThan >= 0 && now.Sub(at) < p.OlderThan) {
			return // oldest first: the rest are kept too
		}
		if _, err := f.cli.Txn(ctx).Then(clientv3.OpDelete(f.k.done(record.RunID(id))), clientv3.OpDelete(key)).Commit(); err != nil {
			return
		}
		var e finishEntry
		_ = json.Unmarshal(kv.Value, &e)
		f.removeLog(record.RunID(id), e.Host)
	}
}

// PruneConfigured is crew prune without flags: the configured retention.
func (f *Fleet) PruneConfigured(dryRun bool) (*recovery.PruneReport, error) {
	ctx, cancel := f.ctx()
	v, err := f.read(ctx)
	cancel()
	if err != nil {
		return nil, err
	}
	if v.cfgErr != nil {
		return nil, v.cfgErr
	}
	return f.Prune(recovery.PruneOptions{Policy: recovery.PolicyOf(v.cfg), DryRun: dryRun})
}
