package dispatch

import (
	"fmt"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/runstore"
)

// StatusVersion is the version of the `crew status --json` schema. Fields
// are added within a version, never renamed or removed.
const StatusVersion = 1

// RunView is a run as `crew status` shows it.
type RunView struct {
	RunID         runstore.RunID `json:"runId"`
	Task          string         `json:"task"`
	State         runstore.State `json:"state"`
	Command       []string       `json:"command"`
	Host          string         `json:"host"`
	CreatedAt     time.Time      `json:"createdAt"`
	StartedAt     *time.Time     `json:"startedAt"`
	FinishedAt    *time.Time     `json:"finishedAt"`
	ExitCode      *int           `json:"exitCode"`
	Signal        string         `json:"signal,omitempty"`
	Reason        string         `json:"reason"`
	SupervisorPID int            `json:"supervisorPid"`
	TaskPID       int            `json:"taskPid"`
	PGID          int            `json:"pgid"`
	Forced        bool           `json:"forced"`
	Pool          string         `json:"pool"`
	// OwnerAlive: a living process holds the run's owner lock.
	OwnerAlive bool `json:"ownerAlive"`
	// SupervisorAlive: the crew process supervising the run lives.
	SupervisorAlive bool `json:"supervisorAlive"`
	// Orphaned: the supervisor is gone but the command still runs.
	Orphaned bool `json:"orphaned"`
	// HoldsSlot: the run counts against maximumInProgress right now.
	HoldsSlot bool   `json:"holdsSlot"`
	LogPath   string `json:"logPath"`
	// Events is the run's history, oldest first.
	Events []runstore.Event `json:"events"`
}

// Problem is a file in the active set that is not a readable record.
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
	LastRefusal *Refusal `json:"lastRefusal,omitempty"`
}

// QueueView is a waiting start.
type QueueView struct {
	Position   int            `json:"position"`
	Task       string         `json:"task"`
	RunID      runstore.RunID `json:"runId"`
	Since      time.Time      `json:"since"`
	Pool       string         `json:"pool"`
	WaitingFor WaitReason     `json:"waitingFor"`
}

// PoolView is one pool's cap and usage.
type PoolView struct {
	Name              string `json:"name"`
	MaximumInProgress int    `json:"maximumInProgress"`
	InUse             int    `json:"inUse"`
}

// FinishedShown is how many finished runs status lists.
const FinishedShown = 10

// Status reads the state root without taking the admission lock and
// without creating or changing any file, so it is safe and accurate while
// starts race. taskFilter, if not empty, keeps only that task's runs.
func (d *Dispatcher) Status(taskFilter string) (*Snapshot, error) {
	st := d.Store
	cfg, exists, err := runstore.LoadConfig(st.Layout)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{
		Version:           StatusVersion,
		Root:              st.Root,
		ConfigPath:        st.ConfigPath(),
		ConfigExists:      exists,
		MaximumInProgress: cfg.MaximumInProgress,
		Active:            []RunView{},
		Finished:          []RunView{},
		Problems:          []Problem{},
		Queue:             []QueueView{},
		Pools:             []PoolView{},
	}
	entries, err := st.ListActive()
	if err != nil {
		return nil, err
	}
	poolUse := map[string]int{}
	for _, e := range entries {
		if e.Finished {
			continue // listed among the finished runs
		}
		if e.Err != nil {
			p := Problem{Path: e.Path, Error: e.Err.Error()}
			if e.ID != "" {
				p.OwnerAlive, _ = lockfs.Probe(st.OwnerLockPath(e.ID))
				p.HoldsSlot = p.OwnerAlive
			}
			if p.HoldsSlot {
				snap.SlotsInUse++
			}
			snap.Problems = append(snap.Problems, p)
			continue
		}
		v := d.view(e.Rec, true)
		if v.HoldsSlot {
			snap.SlotsInUse++
			if v.Pool != "" {
				poolUse[v.Pool]++
			}
		}
		if taskFilter == "" || v.Task == taskFilter {
			snap.Active = append(snap.Active, v)
		}
	}
	for _, name := range cfg.PoolNames() {
		snap.Pools = append(snap.Pools, PoolView{Name: name, MaximumInProgress: cfg.Pools[name], InUse: poolUse[name]})
	}
	snap.Queue = d.queueView(cfg, taskFilter)
	var keep func(*runstore.Record) bool
	if taskFilter != "" {
		keep = func(r *runstore.Record) bool { return r.Task == taskFilter }
	}
	recent, bad, err := st.RecentFinished(FinishedShown, keep)
	if err != nil {
		return nil, err
	}
	for _, r := range recent {
		snap.Finished = append(snap.Finished, d.view(r, false))
	}
	if taskFilter != "" {
		if r := d.LastRefusal(taskFilter); r != nil && refusalIsNews(r, snap) {
			snap.LastRefusal = r
		}
	}
	for _, b := range bad {
		snap.Problems = append(snap.Problems, Problem{Error: b.Error()})
	}
	return snap, nil
}

// refusalIsNews: a refusal matters if no run of the task began after it.
func refusalIsNews(r *Refusal, snap *Snapshot) bool {
	for _, v := range append(append([]RunView{}, snap.Active...), snap.Finished...) {
		if v.CreatedAt.After(r.At) {
			return false
		}
	}
	return true
}

// queueView lists the live tickets in arrival order with what each waits
// for, as admission would decide right now.
func (d *Dispatcher) queueView(cfg runstore.Config, taskFilter string) []QueueView {
	out := []QueueView{}
	live := liveTickets(d.scanQueue(false))
	if len(live) == 0 {
		return out
	}
	view, err := d.scanActive(false, "")
	if err != nil {
		return out
	}
	sim := newSimulation(cfg, view)
	for i, t := range live {
		reason, _, _ := sim.block(t.task, t.pool)
		if reason == "" {
			reason = WaitSlot // being handed a free slot right now
		}
		sim.visit(t)
		if taskFilter != "" && t.task != taskFilter {
			continue
		}
		out = append(out, QueueView{Position: i + 1, Task: t.task, RunID: t.id, Since: t.since, Pool: t.pool, WaitingFor: reason})
	}
	return out
}

// Run returns one run's view, active or finished.
func (d *Dispatcher) Run(id runstore.RunID) (*RunView, error) {
	rec, err := d.Store.ReadRun(id)
	if err != nil {
		return nil, err
	}
	v := d.view(rec, rec.State.Active())
	return &v, nil
}

// view probes a record's locks (for active records) and builds its view.
func (d *Dispatcher) view(r *runstore.Record, probe bool) RunView {
	v := RunView{
		RunID: r.RunID, Task: r.Task, State: r.State, Command: r.Command, Host: r.Host,
		CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		ExitCode: r.ExitCode, Signal: r.Signal, Reason: r.Reason,
		SupervisorPID: r.SupervisorPID, TaskPID: r.TaskPID, PGID: r.PGID, Forced: r.Forced, Pool: r.Pool,
		LogPath: d.Store.LogPath(r.RunID), Events: r.Events,
	}
	if v.Events == nil {
		v.Events = []runstore.Event{}
	}
	if _, err := os.Stat(v.LogPath); err != nil {
		v.LogPath = ""
	}
	if !probe {
		return v
	}
	v.OwnerAlive, _ = lockfs.Probe(d.Store.OwnerLockPath(r.RunID))
	v.SupervisorAlive, _ = lockfs.Probe(d.Store.SupervisorLockPath(r.RunID))
	v.Orphaned = v.OwnerAlive && !v.SupervisorAlive
	v.HoldsSlot = v.OwnerAlive && r.State.Active()
	if !v.OwnerAlive && r.State.Active() {
		v.Reason = fmt.Sprintf("owner process %d is gone; this run holds no slot and will be finalized by the next admission or `crew recover`", r.SupervisorPID)
	}
	return v
}
