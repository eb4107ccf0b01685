// Package backend says what a store must do for crew's one orchestration.
// Admission, the queue, supervision, recovery, retention, status, history,
// resolution, stop and wait are written once (packages dispatch, supervise
// and recovery), over these interfaces; a store (the state root on this
// machine, package localstore; an etcd cluster, package fleet) implements
// them and nothing more. Nothing here decides: deciding is the
// orchestration's, and the policy's (package admission).
//
// The model to keep in mind is etcd's own concurrency package: a session
// (Starter) under which a critical section (Section) is taken; what is
// made inside it (a reservation, a place in line) carries on as a handle
// (Run, Waiter) that the session's death voids.
package backend

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

// Store is one store crew's commands work on. Its parts are interfaces of
// their own, so that each stays small and says one thing.
type Store interface {
	// Where says where the store is, for messages and for the
	// environment of a run's command.
	Where() Where
	// Config reads the store's config (crew.json, or its etcd key).
	Config() (record.Config, ConfigInfo, error)
	// Begin opens one crew start's standing with the store: what its
	// admission lock, its place in line and its slot are kept by (an etcd
	// lease; on a state root, kernel locks that need no session).
	Begin(ctx context.Context, o BeginOptions) (Starter, error)
	Runs() Runs
	Queue() Queue
	Finished() Finished
	Logs() Logs
	Close() error
}

// Where is a store's location.
type Where struct {
	// Name is the store as messages name it: the state root's path, or
	// the etcd store's URL.
	Name string
	// Env is what a run's command is told, NAME=VALUE (CREW_ROOT=... or
	// CREW_STORE=...).
	Env string
	// Remote: the store is shared with other hosts, whose processes crew
	// cannot see from here.
	Remote bool
}

// ConfigInfo says where the config is and whether it exists.
type ConfigInfo struct {
	Path   string
	Exists bool
}

// BeginOptions configure a start's standing.
type BeginOptions struct {
	// LeaseTTL, on a store of leases, is how long the start's slot
	// outlives a supervisor that stopped renewing it.
	LeaseTTL time.Duration
}

// Starter is one crew start's standing with the store. Close it once the
// start is done with it (a reserved run carries on under it until final).
type Starter interface {
	// LockAdmission takes the admission lock, waiting up to timeout.
	LockAdmission(ctx context.Context, timeout time.Duration) (Section, error)
	// Lost reports that the standing is gone (a lease expired): a place
	// in line taken under it is void.
	Lost() error
	Close()
}

// Section is the held admission lock: the machine- or fleet-wide critical
// section around every admission decision. Its reads are re-read under
// the lock; its writes are fenced by it.
type Section interface {
	Config() (record.Config, ConfigInfo, error)
	// Active is the active set, each run with its owner's liveness.
	Active() ([]ActiveRun, error)
	// Tickets is the queue in arrival order, each with its waiter's
	// liveness; *QueueError if it cannot be listed.
	Tickets() ([]Ticket, error)
	// RemoveDeadTicket removes a ticket whose waiter is gone.
	RemoveDeadTicket(id record.RunID)
	// FinalizeDead makes a run whose owner is gone final (interrupted, or
	// with the end it left behind), fenced against its own processes and
	// against every other finalizer.
	FinalizeDead(id record.RunID, now time.Time) (*record.Run, error)
	// Reserve makes rec (provisioning) the reservation of a slot, durably,
	// before the lock goes. An id that is taken already satisfies
	// errors.Is(err, fs.ErrExist): pick another.
	Reserve(rec *record.Run) (Run, error)
	// Resumed is the reservation this start made in an earlier attempt
	// whose answer was lost, if the store can have one (etcd).
	Resumed() Run
	// Enqueue puts t in the queue.
	Enqueue(t *record.Ticket) (Waiter, error)
	// SaveConfig writes the config (crew init).
	SaveConfig(cfg record.Config) error
	Release()
}

// ActiveRun is a record of the active set with its owner's liveness.
type ActiveRun struct {
	ID   record.RunID // empty if the entry is not named by a run id
	Path string       // where it is (a file, a key), for messages
	Rec  *record.Run  // nil if it cannot be read (Err)
	Err  error
	// Owner is who works on the run: alive, dead or unknown.
	Owner record.Owner
	// Finished: the run is final already; this entry is a leftover of its
	// finalization and holds no slot.
	Finished bool
	// Indexed: Rec holds only what admission needs (a fast read).
	Indexed bool
}

// Ticket is a waiting start.
type Ticket struct {
	ID     record.RunID
	Path   string
	Ticket *record.Ticket // nil if it cannot be read (Err)
	Err    error
	Waiter record.Liveness
}

// Waiter is this process's place in the queue.
type Waiter interface {
	ID() record.RunID
	// Woken delivers a value whenever something changed that may let
	// this waiter in (a freed slot, a changed config, a stop request).
	Woken() <-chan struct{}
	// Leave takes the ticket out of the queue; leaving twice is harmless.
	Leave()
}

// Runs is the active set and every run's record.
type Runs interface {
	// Active reads the active set with every run's liveness; fast may
	// count living runs from an index of what admission needs.
	Active(fast bool) ([]ActiveRun, error)
	// Read is a run's record, active or finished; fs.ErrNotExist if none.
	Read(id record.RunID) (*record.Run, error)
	// ReadActive is the run's record in the active set only.
	ReadActive(id record.RunID) (*record.Run, error)
	Owner(id record.RunID, locks *record.LockIDs) record.Owner
	// FinalizeDead is Section.FinalizeDead without the admission lock.
	FinalizeDead(id record.RunID, now time.Time) (*record.Run, error)
	// Stops are the run's stop requests.
	Stops() Stops
}

// Stops are crew stop's requests to a run's (or a waiting start's)
// supervisor.
type Stops interface {
	Write(id record.RunID, req *record.StopRequest) error
	Read(id record.RunID) *record.StopRequest
	Remove(id record.RunID)
}

// Queue is the queue of waiting starts, read without the admission lock.
type Queue interface {
	Tickets() ([]Ticket, error)
	Has(id record.RunID) bool
	WaiterState(id record.RunID) record.Liveness
	// Ring wakes the waiter of ticket id, if the store has to (a store
	// whose waiters watch for changes has nothing to do).
	Ring(id record.RunID)
}

// Finished is the finished runs.
type Finished interface {
	// Newest returns the newest finishes that q selects, each read from
	// its record.
	Newest(q FinishedQuery) (*FinishedRuns, error)
	Remove(id record.RunID) error
}

// FinishedQuery selects finished runs, newest finish first.
type FinishedQuery struct {
	Limit int
	Since time.Time
	Match func(task string, state record.State, exitCode *int) bool
	// Approximate may stop at the newest Limit the index lists in order.
	Approximate bool
	// Also are runs known to be finished that an index may not list yet.
	Also []record.RunID
}

// FinishedRuns is what Newest found.
type FinishedRuns struct {
	Runs []*record.Run
	More bool
	// Problems are finished runs that could not be read.
	Problems []Problem
	// Notes say what the answer rests on (an index missing, junk in it).
	Notes []string
}

// Problem is an entry of the store that is not a readable record.
type Problem struct {
	Path string
	Err  error
}

// Logs are runs' logs (on every store, in this host's state root).
type Logs interface {
	Path(id record.RunID) string
	Has(id record.RunID) bool
	Open(id record.RunID) (io.ReadCloser, error)
}

// Run is an admitted run as its supervisor holds it: its reservation, its
// records' writes, and what keeps its slot.
type Run interface {
	ID() record.RunID
	// Update writes rec (still active) over the run's record.
	Update(rec *record.Run) error
	// Finish records rec (final) durably, takes the run out of the active
	// set and lets its slot go.
	Finish(rec *record.Run) error
	// Claim is what keeps the run's slot, for the command's launch.
	Claim() Claim
	// StopRequests delivers crew stop's requests for the run.
	StopRequests(ctx context.Context) <-chan *record.StopRequest
	// Release lets go of this process's hold without finishing: the run's
	// processes (or a detached supervisor) keep the slot.
	Release()
}

// Claim is what keeps a run's slot while its command runs.
type Claim interface {
	// ExtraFiles are descriptors the command inherits from fd 3 on.
	ExtraFiles() []*os.File
	// Lost delivers why the slot is about to be lost (an etcd lease
	// running out): the command must be stopped before it is.
	Lost() <-chan string
}
