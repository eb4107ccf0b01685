// Package backend says what a store must do for crew's one orchestration.
// Admission, the queue, status, history, resolution, stop and wait are
// written once (package dispatch), over these interfaces; a store (the
// state root on this machine, package localstore; an etcd cluster,
// package fleet) implements them and nothing more. Nothing here decides:
// deciding is the orchestration's, and the policy's (package admission).
//
// The parts are interfaces of their own, so that each stays small and says
// one thing: the store's records of runs (Runs), its queue of waiting
// starts (Queue), its finished runs (History).
package backend

import (
	"context"
	"os"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/proc"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/retention"
	"github.com/crew-dev/crew/internal/vocab"
)

// Store is one store crew's commands work on.
type Store interface {
	// Where says where the store is, for messages.
	Where() Where
	// LoadConfig reads the store's config: the defaults and false if there
	// is none; an unusable one is a *vocab.ConfigError.
	LoadConfig() (cfg record.Config, exists bool, err error)
	// ConfigPath is where the config is, for messages.
	ConfigPath() string
	Runs() Runs
	Queue() Queue
	History() History
	Logs() Logs
	// Begin opens one crew start's standing with the store: what its
	// admission lock, its place in line and its slot are kept by (an etcd
	// lease; on a state root, kernel locks that need no session).
	Begin(ctx context.Context) (Starter, error)
}

// Leases is a store whose runs hold their slots by leases that run out
// (etcd): their commands run under a lease guard (Lease), which must never
// be stopped with them.
type Leases interface {
	// LeaseTTL is how long a slot outlives a supervisor that stopped
	// renewing its lease.
	LeaseTTL() time.Duration
}

// Starter is one crew start's standing with the store. Close it when the
// start is done: a run it reserved carries on (its supervisor holds it).
type Starter interface {
	// LockAdmission takes the admission lock, waiting up to timeout.
	LockAdmission(ctx context.Context, timeout time.Duration) (Section, error)
	Close()
}

// Section is the critical section around every admission decision (on a
// machine, or a fleet). On a state root it is the held admission lock:
// what it reads is read under the lock, and what it writes is fenced by
// it. On etcd it takes no lock (optimistic): it reads one snapshot, and
// each write commits only if nothing the decision read has changed since;
// otherwise the write is not made and its error is a *ConflictError
// (errors.Is(err, ErrConflict)), and the orchestration reads and decides
// again (within --lock-timeout).
type Section interface {
	LoadConfig() (cfg record.Config, exists bool, err error)
	// ScanActive is the active set with every run's liveness.
	ScanActive() ([]ActiveRun, error)
	ListTickets() ([]TicketEntry, error)
	// ListTicketsUntil is ListTickets read only as far as enough wants.
	ListTicketsUntil(enough Enough) ([]TicketEntry, error)
	// RemoveDeadTicket removes a ticket whose waiter is gone, and reports
	// whether it did.
	RemoveDeadTicket(id record.RunID) bool
	// Reserve makes rec (provisioning, with a fresh id) the reservation of
	// a slot, durably, before the lock goes. An id taken already is an
	// error satisfying errors.Is(err, fs.ErrExist).
	Reserve(rec *record.Run) (Run, error)
	// Enqueue puts t in the queue (arrival order is the lock's order).
	Enqueue(t *record.Ticket) (Waiter, error)
	// MoveConfigAside keeps an unusable config out of the way of a new
	// one, and says where (crew init repairing it).
	MoveConfigAside(now time.Time) (string, error)
	// SaveConfig writes the config (crew init).
	SaveConfig(cfg record.Config) error
	Release()
}

// Waiter is this process's place in the queue.
type Waiter interface {
	ID() record.RunID
	// Rung delivers a value when this waiter was told to go: admission
	// would let it in, or it has news of its own (crew stop asked it to
	// leave, it lost its place).
	Rung() <-chan struct{}
	// Changed delivers a value when something changed that may let some
	// waiter in (a slot freed without a word, a watched store's change):
	// worth a look without the admission lock before taking it. Told to
	// every waiter alike, or, where Sentinel says so, to one waiter for
	// all. Nil where the store cannot tell; the waiter then polls.
	Changed() <-chan struct{}
	// Sentinel reports whether this waiter is the one told, for every
	// waiter, of the changes nobody announces (an etcd store's head of
	// the line): when it cannot go itself, it rings whoever may.
	Sentinel() bool
	// Remove takes the ticket out of the queue; removing twice is harmless.
	Remove()
	// LeaveWith takes the ticket out of the queue as Remove does, leaving
	// rec (final, NeverAdmitted: the start never ran) among the finished
	// runs in its place, durably before the ticket goes: what a waiter in
	// the background leaves for crew wait, having no one else to tell.
	LeaveWith(rec *record.Run) error
	// HandOver is what a background waiter (crew __wait, started with
	// it) needs to adopt this place in line (Adopter.AdoptWaiter).
	HandOver() HandOver
	// Release lets go of this process's hold on the place in line without
	// leaving it: a background waiter that adopted it holds it now.
	Release()
}

// Run is an admitted run, as the process that reserved it (and then its
// supervisor) holds it: its record's writes, its stop requests, and what
// keeps its slot.
type Run interface {
	ID() record.RunID
	// Release lets go of this process's hold: the run's processes (or a
	// detached supervisor) keep the slot.
	Release()
	// Update writes rec (still active) over the run's record.
	Update(rec *record.Run) error
	// Finish records rec (final) durably, takes the run out of the active
	// set, and lets its slot go.
	Finish(rec *record.Run) error
	// FinishAgain is Finish after a Finish that failed.
	FinishAgain(rec *record.Run) error
	// KeepOutcome keeps how the run ended (rec, final) where every
	// finalizer looks, when Finish cannot write it (a full disk); an error
	// where the store has nowhere to keep it. OutcomePath says where.
	KeepOutcome(rec *record.Run, cause error) error
	OutcomePath() string
	// ReadStopRequest is crew stop's request for the run, if any.
	ReadStopRequest() *record.StopRequest
	// WatchStops watches for crew stop's requests.
	WatchStops() (StopWatch, error)
	// OthersHold reports whether processes other than this one still hold
	// the run's slot now that its command has ended (what the command
	// left behind); where the store cannot tell, it says they do.
	OthersHold() (bool, error)
	// Holders are the processes that hold the slot, where the system can
	// tell.
	Holders() ([]int, error)
	// LeaveToOthers hands the slot to them: rec (still running, saying how
	// the command ended) is made durable, and this process lets go; the
	// run is final once they are gone.
	LeaveToOthers(rec *record.Run) error
	// Claim is what the command is launched with to keep the slot.
	Claim() Claim
	// HandOver is what a detached supervisor (crew __supervise, started
	// with it) needs to adopt the run (Adopter).
	HandOver() HandOver
}

// HandOver is what a detached supervisor needs to adopt a run (or a
// background waiter, a place in line): the flags that name the store to
// crew, the values the store's Adopt takes back, and the descriptors the
// process inherits (from fd 3 on).
type HandOver struct {
	Store []string
	Adopt []string
	Files []*os.File
}

// Adopter is a store whose runs a detached supervisor, and whose waiting
// starts a background waiter, can adopt.
type Adopter interface {
	// Adopt takes over run id from the process that reserved it, with the
	// values (HandOver.Adopt) and descriptors (from fd 3 on) it handed on.
	Adopt(id record.RunID, values []string, files []*os.File) (Run, error)
	// AdoptWaiter takes over the place in line of ticket id from the
	// start that joined the queue, as Adopt does a run (Waiter.HandOver),
	// with the standing its later admission goes through.
	AdoptWaiter(id record.RunID, values []string, files []*os.File) (Starter, Waiter, error)
}

// StopWatch is how a supervisor notices crew stop's requests.
type StopWatch interface {
	// Changed delivers a value when a request may have been written.
	Changed() <-chan struct{}
	// Notify asks the store to tell of changes (Changed) rather than be
	// polled; false if it cannot.
	Notify() bool
	// Pending is the request not yet acknowledged, if any.
	Pending() *record.StopRequest
	// Acknowledge tells crew stop the request was taken up.
	Acknowledge(req *record.StopRequest, ack record.StopAck) error
	Close()
}

// Claim is what the command of a run is launched with to keep its slot.
type Claim interface {
	// Files are inherited by the command from fd 3 on (a state root's
	// owner lock: the slot is held while any process keeps it).
	Files() []*os.File
	// Env names the store to the command: NAME=VALUE.
	Env() string
	// Lease is what keeps the slot where it can run out while the command
	// runs (an etcd lease); nil where the claim's files keep it.
	Lease() Lease
}

// Lease is a claim that can run out: the command must be dead before it
// can have expired (DESIGN.md invariant 1), so each attempt of the command
// runs under a guard (package leaseguard) that leads its process group and
// kills it in time, even if the supervisor freezes or dies. Losing the
// lease is one more reason to stop the command, as crew stop is.
type Lease interface {
	// Guard starts the guard of one attempt of the command; it refuses
	// when the lease is not Fresh.
	Guard() (Guard, error)
	// Fresh reports whether the lease is certainly valid for longer than
	// an attempt's launch takes (it was renewed lately): no attempt may
	// start on a lease that could run out while its command is started.
	Fresh() bool
	// Expired is closed once the lease is known gone (between attempts,
	// when there is no command to stop).
	Expired() <-chan struct{}
}

// Guard is one attempt's lease guard: the leader of the command's process
// group, alive (and unreaped) for as long as the attempt.
type Guard interface {
	// Pgid is the group the command is started into.
	Pgid() int
	// PID is the guard's own pid, for the record's events.
	PID() int
	// Confirm checks that the guard was alive when the command joined its
	// group: otherwise nothing would kill the command with the lease.
	Confirm() error
	// Losing delivers, once, why the command must stop (the lease about to
	// run out, the guard gone) and how long it has before it is killed.
	Losing() <-chan LeaseLoss
	// Overdue says why the guard killed the command, if the lease's
	// deadline passed while the supervisor could not act (frozen): ""
	// otherwise.
	Overdue() string
	// Signal signals the command's group through the guard, which vouches
	// that the group is still the run's; an error if it cannot.
	Signal(sig syscall.Signal) error
	// End ends the guard and whatever is left in the group: no process of
	// an attempt outlives it.
	End() error
}

// LeaseLoss is why a command must stop for its lease, and how long it has
// before it is killed (0: at once).
type LeaseLoss struct {
	Reason string
	Within time.Duration
}

// Where is a store's location.
type Where struct {
	// Name is the store as messages name it: the state root's path, or
	// the etcd store's URL.
	Name string
	// Kind words it in a message: "the state root", "etcd store".
	Kind string
}

func (w Where) String() string { return w.Kind + " " + w.Name }

// Runs is the store's records of runs, and who works on them.
type Runs interface {
	// ListActive reads every record of the active set.
	ListActive() ([]ActiveEntry, error)
	// ScanActive reads the active set and every run's liveness; fast may
	// count living runs from an index of what admission needs (Indexed).
	ScanActive(fast bool) ([]ActiveRun, error)
	// ReadRun is a run's record, active or finished; an error satisfying
	// errors.Is(err, fs.ErrNotExist) if there is none.
	ReadRun(id record.RunID) (*record.Run, error)
	// ReadActive is the run's record in the active set.
	ReadActive(id record.RunID) (*record.Run, error)
	// OwnerState is whether anyone still works on the run: its owner and
	// its supervisor, each alive, dead or unknown (fail closed). locks,
	// the lock files (or keys) its record names, guards against a lock
	// replaced under its holder.
	OwnerState(id record.RunID, locks *record.LockIDs) record.Owner
	// FinalizeDead makes a run whose owner is gone final (interrupted, or
	// with the end it left behind), fenced against its own processes and
	// every other finalizer, and returns its final record.
	FinalizeDead(id record.RunID, now time.Time) (ReapOutcome, *record.Run, error)
	// FinalizeStopped records a run whose supervisor was gone, and whose
	// processes crew stop has just seen end, as stopped by req.
	FinalizeStopped(id record.RunID, req *record.StopRequest, now time.Time) (ReapOutcome, *record.Run, error)
	// WriteStopRequest asks the run's (or waiting start's) supervisor to
	// stop it.
	WriteStopRequest(id record.RunID, req *record.StopRequest) error
	ReadStopRequest(id record.RunID) *record.StopRequest
	RemoveStopRequest(id record.RunID) error
}

// Enough reports whether the tickets read so far, a beginning of the queue
// in arrival order, are all that their reader needs; nil reads them all.
type Enough func(read []TicketEntry) bool

// Until is the tickets of entries (the queue in arrival order) that
// enough wants: up to and including the first after which it says
// enough. For a store that reads the queue whole anyway.
func Until(entries []TicketEntry, enough Enough) []TicketEntry {
	if enough == nil {
		return entries
	}
	for i := range entries {
		if enough(entries[:i+1]) {
			return entries[:i+1]
		}
	}
	return entries
}

// Queue is the queue of waiting starts.
type Queue interface {
	// ListTickets is the queue in arrival order, each ticket with its
	// waiter's liveness.
	ListTickets() ([]TicketEntry, error)
	// ListTicketsUntil is ListTickets read only as far as enough wants:
	// a waiter deciding for itself needs the tickets ahead of its own, and
	// a ring the line up to where the caps are full, not the whole queue
	// at every handoff (issue 25).
	ListTicketsUntil(enough Enough) ([]TicketEntry, error)
	HasTicket(id record.RunID) bool
	WaiterState(id record.RunID) record.Liveness
	// Ring wakes the waiter of ticket id, where waiters must be woken (a
	// store whose waiters watch it for changes has nothing to do).
	Ring(id record.RunID)
	// QueuePath is where the queue is, for messages.
	QueuePath() string
}

// History is the store's finished runs.
type History interface {
	// FinishedRuns returns the finished runs q selects, newest finish
	// first, each read from its record.
	FinishedRuns(q FinishedQuery) (*Finished, error)
	// FinishedMatching lists the finished runs whose id match accepts,
	// newest finish first: at most limit, and how many there were.
	FinishedMatching(match func(record.RunID) bool, limit int) (refs []FinishedRef, total int, err error)
	// IndexedEndOf is what the store still knows of the end of a run whose
	// record is gone (pruned before a waiter could read it).
	IndexedEndOf(id record.RunID) (end IndexedEnd, ok bool)
	// HoldLog keeps run id from being pruned until released, for a waiter
	// that has seen it; fs.ErrNotExist if there is nothing to hold yet.
	HoldLog(id record.RunID) (LogHold, error)

	// The finished runs as crew prune removes them.
	retention.Finished
	// PruneLazily removes a bounded number of the oldest finished runs
	// that p lets go: what a finishing run does, so that no finish pays
	// for a backlog.
	PruneLazily(p retention.Policy, now time.Time) error
}

// Upkeep is a store's own part of crew recover, beside finalizing the
// dead (Runs): what its layout needs, setting unreadable records aside,
// what crashes left outside records, and derived indexes.
type Upkeep interface {
	// Prepare makes what recovery writes to (a layout directory a copied
	// root lost), unless dry; false if the store holds nothing at all (a
	// state root never made), which recovery leaves so.
	Prepare(dry bool) (bool, error)
	// Quarantine sets an unreadable active record aside, fenced against
	// the run (OwnerBusy: someone holds it; AlreadyDone: it went
	// meanwhile), and says where it went.
	Quarantine(e ActiveEntry, now time.Time, host string) (ReapOutcome, string, error)
	// Sweep removes what crashes left outside run records.
	Sweep(o UpkeepOptions) []vocab.RecoverItem
	// Reindex makes derived indexes agree with the records.
	Reindex(o UpkeepOptions) []vocab.RecoverItem
}

// Foreign is a store that can hold keys crew did not write as it writes
// them (on etcd, a key on no lease where crew writes every key on one),
// which it skips: crew status shows them, and crew recover removes them
// (Upkeep.Sweep).
type Foreign interface {
	Foreign() ([]vocab.Problem, error)
}

// UpkeepOptions bound one pass of upkeep.
type UpkeepOptions struct {
	DryRun   bool
	Deadline time.Time
	// Timeout is what Deadline came from (crew recover --timeout), for
	// messages.
	Timeout time.Duration
}

// LogHold is a waiter's hold on a run.
type LogHold interface {
	// Current reports whether what is held is still the run's.
	Current() bool
	Release()
}

// Logs is where runs' logs are: on every store, in this host's state
// root (a run's log is where its supervisor ran).
type Logs interface {
	HasLog(id record.RunID) bool
	LogPath(id record.RunID) string
}

// Processes is what a store whose runs' processes live on this machine
// can say of them (a state root; not a store shared with other hosts):
// the lock files the kernel shows held by a run's processes (package proc
// proves which they are), and whose a run or a waiting start is.
type Processes interface {
	RunLockIDs(id record.RunID) (owner, sup proc.FileID, err error)
	// RunUser is the user a run belongs to; WaiterUser, a waiting start.
	RunUser(id record.RunID, locks *record.LockIDs) (int, error)
	WaiterUser(id record.RunID) (int, error)
}

// DeadWaiters is a store where a waiting start that died in line leaves
// its ticket behind (a state root: the ticket outlives its waiter's lock,
// until an admission removes it), so that the admission removing it can
// leave the start's final record first: crew wait on its id then says
// how it ended whoever removed the ticket. (On etcd a ticket goes with
// its waiter's lease, unseen.)
type DeadWaiters interface {
	// RecordNeverAdmitted records rec (final, NeverAdmitted) among the
	// finished runs, durably.
	RecordNeverAdmitted(rec *record.Run) error
}

// Sizes is a store that can say how much its records and logs take.
type Sizes interface {
	Size() (vocab.RootSize, error)
}

// Refusals is a store that keeps refused starts, for crew status TASK.
type Refusals interface {
	AppendRefusal(r record.Refusal)
	LastRefusal(task string) *record.Refusal
}
