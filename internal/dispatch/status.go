package dispatch

import (
	"errors"
	"fmt"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// Status reads the state root without taking the admission lock and
// without creating or changing any file, so it is safe and accurate while
// starts race. Slot
// usage is counted exactly as admission counts it.
//
// The runs are those sq selects (by task and labels); the slots, pools and
// problems are the whole store's all the same.
func (d *Dispatcher) Status(sq vocab.StatusQuery) (*vocab.Snapshot, error) {
	taskFilter := sq.Task
	cfg, exists, err := d.Store.LoadConfig()
	problem, err := configProblem(err)
	if err != nil {
		return nil, err
	}
	snap := &vocab.Snapshot{Version: vocab.StatusVersion, Root: d.Store.Where().Name, ConfigPath: d.Store.ConfigPath(), ConfigExists: exists,
		MaximumInProgress: cfg.MaximumInProgress, Active: []vocab.RunView{}, Finished: []vocab.RunView{},
		Problems: []vocab.Problem{}, Queue: []vocab.QueueView{}, Pools: []vocab.PoolView{}, ConfigError: problem,
		Retention: retentionView(cfg), LogMax: cfg.LogMax}
	sized := measureSize(d.Store, sq)
	defer sized() // nothing outlives Status, on any path
	set, err := d.readActive(false, nil)
	if err != nil {
		return nil, err
	}
	usage := set.usage()
	snap.SlotsInUse = usage.InUse
	for _, e := range set.entries {
		switch {
		case e.Finished:
			// listed among the finished runs
		case e.Err != nil:
			o := set.owners[e.ID]
			alive := e.ID != "" && o.Owner.MayLive()
			snap.Problems = append(snap.Problems, vocab.Problem{Path: e.Path, Error: e.Err.Error(), OwnerAlive: alive, HoldsSlot: alive})
		case sq.Selects(e.Rec.Task, e.Rec.Labels):
			snap.Active = append(snap.Active, d.liveView(e.Rec, set.owners[e.ID]))
		}
	}
	for _, name := range cfg.PoolNames() {
		snap.Pools = append(snap.Pools, vocab.PoolView{Name: name, MaximumInProgress: cfg.Pools[name], InUse: usage.PoolUse[name]})
	}
	var queueProblems []vocab.Problem
	snap.Queue, queueProblems = d.queueView(cfg, problem != nil, usage, sq)
	snap.Problems = append(snap.Problems, queueProblems...)
	foreign, err := foreignProblems(d.Store)
	if err != nil {
		return nil, err
	}
	snap.Problems = append(snap.Problems, foreign...)
	q := backend.FinishedQuery{Limit: vocab.FinishedShown, Approximate: true}
	if taskFilter != "" {
		q.Match = func(task string, _ record.State, _ *int) bool { return task == taskFilter }
	}
	for _, e := range set.entries {
		if e.Finished {
			q.Also = append(q.Also, e.ID) // finished, maybe not indexed yet
		}
	}
	fin, _, err := d.parts().finishedRuns(q, sq.Labels)
	if err != nil {
		return nil, err
	}
	for _, r := range fin.Runs {
		snap.Finished = append(snap.Finished, finishedView(d.Store.Logs(), r))
	}
	if refusals, ok := d.Store.(backend.Refusals); ok && taskFilter != "" && len(sq.Labels) == 0 {
		if r := refusals.LastRefusal(taskFilter); r != nil && refusalIsNews(r, snap) {
			snap.LastRefusal = r
		}
	}
	snap.Problems = append(snap.Problems, finishedProblems(fin)...)
	if snap.Size, err = sized(); err != nil {
		return nil, err
	}
	return snap, nil
}

// measureSize measures the store's size, when status shows it (the whole
// store, nothing filtered out), beside the rest of status: on a long
// history it is the most of status's own time (listing hour-shards, a few
// hundred stats), and it shares nothing with the runs' views but the
// root, whose handles are safe to share between goroutines. The function
// it returns waits for the measurement (nil if none); a second call
// returns the same.
func measureSize(store backend.Store, sq vocab.StatusQuery) func() (*vocab.RootSize, error) {
	sizes, ok := store.(backend.Sizes)
	if !ok || sq.Task != "" || len(sq.Labels) > 0 {
		return func() (*vocab.RootSize, error) { return nil, nil }
	}
	done := make(chan struct{})
	var size vocab.RootSize
	var err error
	go func() {
		defer close(done)
		size, err = sizes.Size()
	}()
	return func() (*vocab.RootSize, error) {
		<-done
		if err != nil {
			return nil, err
		}
		return &size, nil
	}
}

// refusalIsNews: a refusal matters if no run of the task began after it.
func refusalIsNews(r *record.Refusal, snap *vocab.Snapshot) bool {
	for _, v := range append(append([]vocab.RunView{}, snap.Active...), snap.Finished...) {
		if v.CreatedAt.After(r.At) {
			return false
		}
	}
	return true
}

// foreignProblems are the keys the store skips as not crew's, if it can
// hold any (backend.Foreign).
func foreignProblems(s backend.Store) ([]vocab.Problem, error) {
	if fs, ok := s.(backend.Foreign); ok {
		return fs.Foreign()
	}
	return nil, nil
}

// configProblem turns an unusable crew.json into what status shows; any
// other error is status's own.
func configProblem(err error) (*vocab.ConfigProblem, error) {
	var ce *vocab.ConfigError
	if err == nil || !errors.As(err, &ce) {
		return nil, err
	}
	line, col := ce.Place()
	return &vocab.ConfigProblem{Path: ce.Path, Line: line, Column: col, Error: ce.Error()}, nil
}

// queueView lists the waiting starts in arrival order with what each
// waits for, as admission would decide right now; with an unusable
// config (noConfig), the config is what they all wait for. A queue that
// cannot be listed, and tickets that cannot be read, are problems.
func (d *Dispatcher) queueView(cfg record.Config, noConfig bool, usage admission.Usage, sq vocab.StatusQuery) ([]vocab.QueueView, []vocab.Problem) {
	out := []vocab.QueueView{}
	line, err := d.liveQueue(nil)
	var qe *vocab.QueueError
	if errors.As(err, &qe) {
		return out, []vocab.Problem{{Path: qe.Path, Error: qe.Error()}}
	}
	var problems []vocab.Problem
	for _, p := range line.unreadable {
		problems = append(problems, vocab.Problem{Path: p.path, Error: p.err.Error() + ": its waiter lives, so it keeps its place in line", OwnerAlive: true})
	}
	queue := line.tickets
	var plan []admission.Verdict
	if !noConfig {
		plan = admission.Plan(cfg, usage, queue)
	}
	for i, t := range queue {
		if (sq.Task != "" || len(sq.Labels) > 0) && (t.Unreadable || !sq.Selects(t.Task, line.labels[t.ID])) {
			continue // an unreadable ticket too: whose it is, nobody can tell
		}
		reason := admission.WaitConfig
		if !noConfig {
			reason = plan[i].Reason
			if plan[i].Admit {
				reason = admission.WaitSlot // being handed a free slot right now
			}
		}
		out = append(out, vocab.QueueView{Position: i + 1, Task: t.Task, RunID: t.ID, Since: t.Since, Pool: t.Pool, WaitingFor: reason,
			Labels: line.labels[t.ID], Unreadable: t.Unreadable})
	}
	return out, problems
}

// Run returns one run's view, active or finished.
func (d *Dispatcher) Run(id record.RunID) (*vocab.RunView, error) {
	rec, err := d.runs().ReadRun(id)
	if err != nil {
		return nil, err
	}
	if !rec.State.Active() {
		v := finishedView(d.Store.Logs(), rec)
		return &v, nil
	}
	v := d.liveView(rec, d.runs().OwnerState(id, rec.Locks))
	return &v, nil
}

func finishedView(logs backend.Logs, r *record.Run) vocab.RunView {
	v := vocab.ViewOf(r)
	if v.Events == nil {
		v.Events = []record.Event{}
	}
	if logs.HasLog(r.RunID) {
		v.LogPath = logs.LogPath(r.RunID)
	}
	return v
}

// liveView is an active run's view with its owner's liveness, and an
// orphan's with the processes that hold its slot.
func (d *Dispatcher) liveView(r *record.Run, o record.Owner) vocab.RunView {
	v := finishedView(d.Store.Logs(), r)
	v.Owner = o.Owner.String()
	v.OwnerAlive = o.Owner.MayLive()
	v.SupervisorAlive = o.Supervisor == record.Alive
	v.Orphaned = o.Orphaned()
	v.HoldsSlot = o.HoldsSlot(r.State)
	if o.Owner == record.Dead && r.State.Active() {
		v.Reason = fmt.Sprintf("owner process %d is gone; this run holds no slot and will be finalized by the next admission or `crew recover`", r.SupervisorPID)
	}
	if v.Orphaned {
		v.HolderPIDs, v.HoldersUnknown = d.orphanHolders(r.RunID)
	}
	return v
}

// orphanHolders lists the processes that hold an orphan's slot, or says
// why it cannot be told.
func (d *Dispatcher) orphanHolders(id record.RunID) ([]int, string) {
	pids, err := d.holderPIDs(id)
	if err != nil {
		return nil, err.Error()
	}
	return pids, ""
}
