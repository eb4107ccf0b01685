package vocab

import (
	"time"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/record"
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
	// DurationMs, for a finished run, is how long it took in
	// milliseconds: from its start (its admission if the command never
	// started) to its finish, as the text's TOOK column shows it.
	DurationMs *int64 `json:"durationMs,omitempty"`
}

// ViewOf is a run's view with what its record alone tells: for a
// finished run, its duration.
func ViewOf(r *record.Run) RunView {
	v := RunView{Run: *r}
	if r.FinishedAt != nil && !r.State.Active() {
		began := r.CreatedAt
		if r.StartedAt != nil {
			began = *r.StartedAt
		}
		ms := max(r.FinishedAt.Sub(began).Milliseconds(), 0)
		v.DurationMs = &ms
	}
	return v
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
	Size *RootSize `json:"size,omitempty"`
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
	// Labels are the waiting start's --label pairs.
	Labels record.Labels `json:"labels,omitempty"`
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

// RetentionView is crew.json's retention as `crew status --json` shows it.
type RetentionView struct {
	// Retain: keep the newest Retain finished runs (0: any number).
	Retain int `json:"retain"`
	// RetainFor: keep finished runs younger than this ("30d"; "": any
	// age), also in seconds.
	RetainFor        string `json:"retainFor"`
	RetainForSeconds int64  `json:"retainForSeconds"`
}

// HistoryVersion is the version of the `crew history --json` schema.
const HistoryVersion = 1

// History is `crew history`: finished runs, newest finish first.
type History struct {
	Version int       `json:"version"`
	Runs    []RunView `json:"runs"`
	// Problems are finished records that could not be read, and what is
	// wrong with the index of finished runs, if anything.
	Problems []Problem `json:"problems"`
	// Unindexed, if set, says why the runs were found from the records
	// rather than the index of finished runs (which crew recover builds).
	Unindexed string `json:"unindexed,omitempty"`
	// Limit is the --limit the runs were cut to (0: none), and More says
	// that more runs match than Runs lists (--limit 0 lists them all).
	Limit int  `json:"limit"`
	More  bool `json:"more"`
}

// InitResult says what Init found and wrote.
type InitResult struct {
	Path    string
	Existed bool // a readable crew.json was there before
	Old     int  // its maximumInProgress, if it existed
	New     int
	Pools   map[string]int // the pools now configured
	// Broken, if crew.json was unusable, is why; MovedAside is where it
	// was moved, so that nothing it held (pools) is lost silently.
	Broken     string
	MovedAside string
	// Config is crew.json as it is now.
	Config record.Config
}

// ShareResult says what Share or Unshare did.
type ShareResult struct {
	Root    string
	Group   string // "" after Unshare
	Changed int
	Skipped []string
}

// Ref is what a RUN|TASK argument names: a run (or a waiting start's
// ticket), or a task.
type Ref struct {
	Run  record.RunID
	Task string
}

// Candidate is one of the runs an ambiguous argument could mean.
type Candidate struct {
	ID    record.RunID
	Task  string
	State string
}

// RootSize is what the state root's records and logs take, as `crew
// status` reports it.
type RootSize struct {
	// Bytes is Records.Bytes + Logs.Bytes.
	Bytes   int64     `json:"bytes"`
	Records FileCount `json:"records"`
	Logs    FileCount `json:"logs"`
	// Exact is false when part of it was extrapolated (see Method).
	Exact bool `json:"exact"`
	// Crowded lists the hour-shards that hold more runs than a size
	// measurement lists: it counted only part of each, so their counts,
	// and the totals, are lower bounds.
	Crowded []string `json:"crowded,omitempty"`
	// Method says how the figures were obtained.
	Method string `json:"method"`
}

// FileCount is a number of files and their bytes.
type FileCount struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}
