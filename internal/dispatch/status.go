package dispatch

import (
	"errors"
	"fmt"
	"time"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

// StatusVersion is the version of the `crew status --json` schema. Fields
// are added within a version, never renamed or removed.
const StatusVersion = 1

// RunView is a run as `crew status` shows it: its record, and what is
// known live about it.
type RunView struct {
	record.Run
	// Owner is the owner's liveness: alive, dead or unknown (could not be
	// probed; it then counts as holding its slot, as in admission).
	Owner string `json:"owner,omitempty"`
	// OwnerAlive: the owner may live (a living process holds the run's
	// owner lock, or it cannot be told).
	OwnerAlive bool `json:"ownerAlive"`
	// SupervisorAlive: the crew process supervising the run lives.
	SupervisorAlive bool `json:"supervisorAlive"`
	// Orphaned: the supervisor is gone but the command still runs.
	Orphaned bool `json:"orphaned"`
	// HoldsSlot: the run counts against maximumInProgress right now.
	HoldsSlot bool   `json:"holdsSlot"`
	LogPath   string `json:"logPath"`
	// HolderPIDs, for an orphan, are the command's processes that hold
	// its slot, as the kernel shows them: the holders of its owner lock
	// (Linux). The record's TaskPID is 0 when the supervisor died before
	// recording the start; these are what crew can prove instead.
	HolderPIDs []int `json:"holderPids,omitempty"`
	// HoldersUnknown says why HolderPIDs could not be listed (macOS: no
	// /proc to prove it).
	HoldersUnknown string `json:"holderPidsUnknown,omitempty"`
}

// Problem is a file in the state root that is not a readable record.
type Problem struct {
	Path       string `json:"path"`
	Error      string `json:"error"`
	OwnerAlive bool   `json:"ownerAlive"`
	HoldsSlot  bool   `json:"holdsSlot"`
}

// Snapshot is `crew status`: what holds the slots and what ran lately.
type Snapshot struct {
	Version           int       `json:"version"`
	Root              string    `json:"root"`
	ConfigPath        string    `json:"configPath"`
	ConfigExists      bool      `json:"configExists"`
	MaximumInProgress int       `json:"maximumInProgress"`
	SlotsInUse        int       `json:"slotsInUse"`
	Active            []RunView `json:"active"`
	Finished          []RunView `json:"finished"`
	Problems          []Problem `json:"problems"`
	// Queue lists the waiting starts in the order they will be admitted.
	Queue []QueueView `json:"queue"`
	// Pools shows each configured pool's usage.
	Pools []PoolView `json:"pools"`
	// LastRefusal, with a task filter, is the task's latest refused start,
	// if it came after the task's latest run.
	LastRefusal *record.Refusal `json:"lastRefusal,omitempty"`
	// ConfigError, if set, says crew.json is unusable: nothing is admitted
	// until it is fixed, and MaximumInProgress is 0 (unknown).
	ConfigError *ConfigProblem `json:"configError,omitempty"`
	// Retention is crew.json's retention; LogMax its log cap (0: none).
	Retention RetentionView `json:"retention"`
	LogMax    int64         `json:"logMax"`
	// Size is what the records and logs take (without a task filter).
	Size *runstore.RootSize `json:"size,omitempty"`
}

// ConfigProblem is an unusable crew.json.
type ConfigProblem struct {
	Path string `json:"path"`
	// Line and Column (1-based) are where the content goes wrong; 0 when
	// the file could not be read at all, or the problem has no place.
	Line   int `json:"line"`
	Column int `json:"column"`
	// Error is the whole message, PATH:LINE:COL: what is wrong, and the fix.
	Error string `json:"error"`
}

// QueueView is a waiting start.
type QueueView struct {
	Position   int              `json:"position"`
	Task       string           `json:"task"`
	RunID      record.RunID     `json:"runId"`
	Since      time.Time        `json:"since"`
	Pool       string           `json:"pool"`
	WaitingFor admission.Reason `json:"waitingFor"`
	// Host is where the waiting crew start runs (on an etcd store, one
	// of many), if known.
	Host string `json:"host,omitempty"`
	// Unreadable: its ticket cannot be read (task and pool unknown), but
	// its waiter lives, so it keeps its place; Problems says why.
	Unreadable bool `json:"unreadable,omitempty"`
}

// PoolView is one pool's cap and usage.
type PoolView struct {
	Name              string `json:"name"`
	MaximumInProgress int    `json:"maximumInProgress"`
	InUse             int    `json:"inUse"`
}

// FinishedShown is how many finished runs status lists: the newest
// finishes.
const FinishedShown = 10

// Status reads the state root without taking the admission lock and
// without creating or changing any file, so it is safe and accurate while
// starts race. taskFilter, if not empty, keeps only that task's runs. Slot
// usage is counted exactly as admission counts it.
func (d *Dispatcher) Status(taskFilter string) (*Snapshot, error) {
	st := d.Store
	cfg, exists, err := st.LoadConfig()
	problem, err := configProblem(err)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Version: StatusVersion, Root: st.Root(), ConfigPath: st.ConfigPath(), ConfigExists: exists,
		MaximumInProgress: cfg.MaximumInProgress, Active: []RunView{}, Finished: []RunView{},
		Problems: []Problem{}, Queue: []QueueView{}, Pools: []PoolView{}, ConfigError: problem,
		Retention: retentionView(cfg), LogMax: cfg.LogMax}
	if taskFilter == "" {
		size, err := st.Size()
		if err != nil {
			return nil, err
		}
		snap.Size = &size
	}
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
			snap.Problems = append(snap.Problems, Problem{Path: e.Path, Error: e.Err.Error(), OwnerAlive: alive, HoldsSlot: alive})
		case taskFilter == "" || e.Rec.Task == taskFilter:
			snap.Active = append(snap.Active, d.liveView(e.Rec, set.owners[e.ID]))
		}
	}
	for _, name := range cfg.PoolNames() {
		snap.Pools = append(snap.Pools, PoolView{Name: name, MaximumInProgress: cfg.Pools[name], InUse: usage.PoolUse[name]})
	}
	var queueProblems []Problem
	snap.Queue, queueProblems = d.queueView(cfg, problem != nil, usage, taskFilter)
	snap.Problems = append(snap.Problems, queueProblems...)
	q := runstore.FinishedQuery{Limit: FinishedShown, Approximate: true}
	if taskFilter != "" {
		q.Match = func(task string, _ record.State, _ *int) bool { return task == taskFilter }
	}
	for _, e := range set.entries {
		if e.Finished {
			q.Also = append(q.Also, e.ID) // finished, maybe not indexed yet
		}
	}
	fin, err := st.FinishedRuns(q)
	if err != nil {
		return nil, err
	}
	for _, r := range fin.Runs {
		snap.Finished = append(snap.Finished, d.finishedView(r))
	}
	if taskFilter != "" {
		if r := st.LastRefusal(taskFilter); r != nil && refusalIsNews(r, snap) {
			snap.LastRefusal = r
		}
	}
	snap.Problems = append(snap.Problems, finishedProblems(st, fin)...)
	return snap, nil
}

// refusalIsNews: a refusal matters if no run of the task began after it.
func refusalIsNews(r *record.Refusal, snap *Snapshot) bool {
	for _, v := range append(append([]RunView{}, snap.Active...), snap.Finished...) {
		if v.CreatedAt.After(r.At) {
			return false
		}
	}
	return true
}

// configProblem turns an unusable crew.json into what status shows; any
// other error is status's own.
func configProblem(err error) (*ConfigProblem, error) {
	var ce *runstore.ConfigError
	if err == nil || !errors.As(err, &ce) {
		return nil, err
	}
	line, col := ce.Place()
	return &ConfigProblem{Path: ce.Path, Line: line, Column: col, Error: ce.Error()}, nil
}

// queueView lists the waiting starts in arrival order with what each
// waits for, as admission would decide right now; with an unusable
// config (noConfig), the config is what they all wait for. A queue that
// cannot be listed, and tickets that cannot be read, are problems.
func (d *Dispatcher) queueView(cfg record.Config, noConfig bool, usage admission.Usage, taskFilter string) ([]QueueView, []Problem) {
	out := []QueueView{}
	line, err := d.liveQueue(nil)
	var qe *QueueError
	if errors.As(err, &qe) {
		return out, []Problem{{Path: qe.Path, Error: qe.Error()}}
	}
	var problems []Problem
	for _, p := range line.unreadable {
		problems = append(problems, Problem{Path: p.path, Error: p.err.Error() + ": its waiter lives, so it keeps its place in line", OwnerAlive: true})
	}
	queue := line.tickets
	var plan []admission.Verdict
	if !noConfig {
		plan = admission.Plan(cfg, usage, queue)
	}
	for i, t := range queue {
		if taskFilter != "" && t.Task != taskFilter {
			continue // an unreadable ticket too: whose it is, nobody can tell
		}
		reason := admission.WaitConfig
		if !noConfig {
			reason = plan[i].Reason
			if plan[i].Admit {
				reason = admission.WaitSlot // being handed a free slot right now
			}
		}
		out = append(out, QueueView{Position: i + 1, Task: t.Task, RunID: t.ID, Since: t.Since, Pool: t.Pool, WaitingFor: reason, Unreadable: t.Unreadable})
	}
	return out, problems
}

// Run returns one run's view, active or finished.
func (d *Dispatcher) Run(id record.RunID) (*RunView, error) {
	rec, err := d.Store.ReadRun(id)
	if err != nil {
		return nil, err
	}
	if !rec.State.Active() {
		v := d.finishedView(rec)
		return &v, nil
	}
	v := d.liveView(rec, d.Store.OwnerState(id, rec.Locks))
	return &v, nil
}

func (d *Dispatcher) finishedView(r *record.Run) RunView {
	v := RunView{Run: *r}
	if v.Events == nil {
		v.Events = []record.Event{}
	}
	if d.Store.HasLog(r.RunID) {
		v.LogPath = d.Store.LogPath(r.RunID)
	}
	return v
}

// liveView is an active run's view with its owner's liveness, and an
// orphan's with the processes that hold its slot.
func (d *Dispatcher) liveView(r *record.Run, o record.Owner) RunView {
	v := d.finishedView(r)
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
