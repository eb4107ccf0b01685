package backend

import (
	"time"

	"github.com/crew-dev/crew/internal/record"
)

// ActiveEntry is one file of the active set. Unless Finished is set,
// exactly one of Rec and Err is set: a file that cannot be read as a record
// is reported, never skipped silently and never fatal to the listing.
type ActiveEntry struct {
	ID   record.RunID // from the file name; empty if the name is not a run id
	Name string       // the file's name in the active set
	Path string       // its full path, for messages
	Rec  *record.Run
	Err  error
	// Finished: the run already has a finished record, or this active
	// file's record is final (a finish whose move into the finished runs
	// was cut short; Rec is that record): a leftover of its finalization,
	// which holds no slot.
	Finished bool
	// Indexed: Rec comes from the active index (ScanActive with fast): it
	// holds what admission needs, and its State is running whatever the
	// record says (provisioning or running).
	Indexed bool
}

// ActiveRun is an entry of the active set with its owner's liveness.
type ActiveRun struct {
	ActiveEntry
	Owner record.Owner
}

// TicketEntry is one ticket of the queue: Ticket, or Err if it is
// unreadable, and whether its waiter lives.
type TicketEntry struct {
	ID     record.RunID
	Path   string // where it is, for messages
	Ticket *record.Ticket
	Err    error
	Waiter record.Liveness
}

// FinishedQuery selects finished runs, newest finish first.
type FinishedQuery struct {
	// Limit is the most runs returned; 0 returns every match.
	Limit int
	// Since keeps only runs that finished at or after it (zero: any).
	Since time.Time
	// Match, if set, keeps runs by task, state and exit code (nil when
	// unknown). It is asked about index entries, to skip the records of
	// runs that cannot match, and about every record returned.
	Match func(task string, state record.State, exit *int) bool
	// Also are runs known to be finished that the index may not list yet:
	// the finished leftovers of the active set.
	Also []record.RunID
	// Approximate: without a usable index, take the newest-created
	// finished runs (in finish order) instead of finding the newest
	// finishes among all records, which can mean reading them all. It is
	// what crew status did before the index, exact where runs do not
	// overlap, and costs what it shows (a state root crew recover has not
	// indexed yet must not make status slow).
	Approximate bool
}

// Finished is what FinishedRuns found.
type Finished struct {
	// Runs, newest finish first (ties: newest run id first).
	Runs []*record.Run
	// Bad are the records that could not be read.
	Bad []BadRecord
	// Unindexed, if set, says why the index was not used: the runs were
	// found from the records themselves, which costs more.
	Unindexed string
	// IndexProblem, if set, says what is wrong with the index (lines that
	// are not entries, stamps out of order): the runs were found anyway,
	// and crew recover repairs it.
	IndexProblem string
	// IndexPath is where the index is, for IndexProblem's message.
	IndexPath string
}

// BadRecord is a finished record that could not be read.
type BadRecord struct {
	Path string
	Err  error
}

// FinishedRef names a finished run, for lists of candidates.
type FinishedRef struct {
	ID    record.RunID
	Task  string
	State record.State
}

// IndexedEnd is how the index of finished runs says a run ended.
type IndexedEnd struct {
	Task     string
	State    record.State
	Exit     *int
	Finished time.Time
}

// ReapOutcome says what a finalization (Runs.FinalizeDead, FinalizeStopped) did with one run.
type ReapOutcome int

const (
	// Reaped: the run's owner was gone; its record is now final
	// (interrupted) and out of the active set.
	Reaped ReapOutcome = iota + 1
	// LeftoverRemoved: the run had already been finalized; only its active
	// file and lock files were left, and are now removed.
	LeftoverRemoved
	// OwnerBusy: someone holds the run's locks (the run lives, or another
	// process is finalizing it); nothing was touched.
	OwnerBusy
	// AlreadyDone: the run was finalized by someone else meanwhile.
	AlreadyDone
)
