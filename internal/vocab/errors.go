package vocab

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/record"
)

// UsageError is a bad argument; nothing was changed.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// NotFoundError is a RUN|TASK argument that names nothing in the state
// root.
type NotFoundError struct{ Err error }

func (e *NotFoundError) Error() string { return e.Err.Error() }
func (e *NotFoundError) Unwrap() error { return e.Err }

// RefusalKind says why a run was not admitted.
type RefusalKind int

const (
	// SlotsBusy: every slot (or its pool's) is held by a living run, or
	// older waiting starts are owed the free ones.
	SlotsBusy RefusalKind = iota + 1
	// TaskActive: the task already has a living active run, or an older
	// waiting start.
	TaskActive
)

// RefusedError is a run that was not admitted; nothing was recorded.
type RefusedError struct {
	Kind    RefusalKind
	Task    string
	InUse   int
	Maximum int
	Holders []admission.Holder // for TaskActive, the task's run; for SlotsBusy, the runs holding slots
	// OlderTicket is an older waiting start of the same task (TaskActive).
	OlderTicket record.RunID
	// Pool, with PoolFull, says the run's pool was the cap that was hit.
	Pool               string
	PoolInUse, PoolMax int
	PoolFull           bool
	// QueueAhead: a slot was free, but older waiting starts get it first.
	QueueAhead bool
	Ahead      int
	// WaitedFor is set when a waiting start gave up (--wait=D).
	WaitedFor time.Duration
	// Warnings are problems admission noticed in the active set.
	Warnings []error
}

func (e *RefusedError) Error() string {
	var b strings.Builder
	b.WriteString("not admitted: ")
	if e.WaitedFor > 0 {
		fmt.Fprintf(&b, "gave up after waiting %s in the queue; ", e.WaitedFor)
	}
	switch {
	case e.Kind == TaskActive && len(e.Holders) > 0:
		h := e.Holders[0]
		fmt.Fprintf(&b, "task %q is already running as %s (%s since %s)",
			e.Task, h.RunID, h.State, h.Since.Local().Format(time.DateTime))
		return b.String()
	case e.Kind == TaskActive:
		fmt.Fprintf(&b, "an older waiting start of task %q (%s) goes first", e.Task, e.OlderTicket)
		return b.String()
	case e.QueueAhead:
		fmt.Fprintf(&b, "%d waiting start(s) are ahead in the queue for the free slot(s) (%d/%d in use); use --wait to line up", e.Ahead, e.InUse, e.Maximum)
		return b.String()
	case e.PoolFull:
		fmt.Fprintf(&b, "pool %q is full (%d/%d in use; all slots %d/%d)", e.Pool, e.PoolInUse, e.PoolMax, e.InUse, e.Maximum)
	default:
		fmt.Fprintf(&b, "all slots are busy (%d/%d in use)", e.InUse, e.Maximum)
	}
	for i, h := range e.Holders {
		if i == 3 {
			fmt.Fprintf(&b, ", and %d more", len(e.Holders)-i)
			break
		}
		sep := ": "
		if i > 0 {
			sep = ", "
		}
		fmt.Fprintf(&b, "%s%q (%s)", sep, h.Task, h.RunID)
	}
	if e.WaitedFor == 0 {
		b.WriteString("; see `crew status`, wait with --wait, or use --force to run past the cap")
	}
	return b.String()
}

// NotPermittedError is a stop that would take another user's rights: the
// run or waiting start belongs to a user other than the one asking, who is
// not root. Nothing was signalled or changed.
type NotPermittedError struct{ Err error }

func (e *NotPermittedError) Error() string { return e.Err.Error() }
func (e *NotPermittedError) Unwrap() error { return e.Err }

// NestedDeadlockError is a start refused because it could only wait for
// runs that are its own ancestors: a command run by crew calling crew
// start for a slot its own run holds. Nothing was recorded.
type NestedDeadlockError struct {
	Task string
	// Ancestors are the runs in the way, nearest first (the first is the
	// run in CREW_RUN_ID when it is one of them).
	Ancestors []admission.Holder
	// SameTask: the task's own active run is an ancestor.
	SameTask       bool
	InUse, Maximum int
	// Pool is set when the start's pool, full of ancestors, is the barrier.
	Pool               string
	PoolInUse, PoolMax int
}

func (e *NestedDeadlockError) Error() string {
	var b strings.Builder
	b.WriteString("not admitted: it would wait forever for ")
	switch {
	case e.SameTask:
		fmt.Fprintf(&b, "its own task's active run, which is the run it was started from: ")
	case e.Pool != "":
		fmt.Fprintf(&b, "pool %q (%d/%d in use), all held by runs it was started from: ", e.Pool, e.PoolInUse, e.PoolMax)
	default:
		fmt.Fprintf(&b, "a slot (%d/%d in use), all held by runs it was started from: ", e.InUse, e.Maximum)
	}
	for i, h := range e.Ancestors {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "task %q (run %s, %s since %s)", h.Task, h.RunID, h.State, h.Since.Local().Format("15:04:05"))
	}
	b.WriteString("; they cannot end while this start, run from their commands (CREW_RUN_ID), waits for them. ")
	switch {
	case e.SameTask:
		b.WriteString("Give the nested start a task of its own, or run the command without crew start")
	case e.Pool != "":
		fmt.Fprintf(&b, "Raise the pool's cap (crew init --pool %s=%d), or run the command without crew start", e.Pool, e.PoolMax+1)
	default:
		fmt.Fprintf(&b, "Raise the cap (crew init --max %d), or run the command without crew start", e.Maximum+1)
	}
	return b.String()
}

// QueueError is a queue that cannot be listed: nobody can tell whether
// waiting starts are owed a free slot, so no start is let past them.
type QueueError struct {
	Path string // the queue's directory
	Err  error
}

func (e *QueueError) Error() string {
	return fmt.Sprintf("cannot read the queue of waiting starts (%v). Fix: make %s a directory crew can list "+
		"(its owner, mode 0700, or 2770 in a root shared with a group), then try again", e.Err, e.Path)
}

func (e *QueueError) Unwrap() error { return e.Err }

// ErrWaitTimeout is a wait that ran out of time.
var ErrWaitTimeout = errors.New("timed out")

// RunGoneError is a run a waiter saw, whose record was removed before it
// could read it (by hand, or by a prune while nothing held it), and which
// the index of finished runs no longer lists: its exit status is unknown.
type RunGoneError struct{ ID record.RunID }

func (e *RunGoneError) Error() string {
	return fmt.Sprintf("run %s ended, but its record was removed before crew could read it, and the index of finished runs no longer lists it: its exit status is unknown", e.ID)
}

// StopError is a stop that could not be carried out.
type StopError struct{ Err error }

func (e *StopError) Error() string { return e.Err.Error() }

func (e *StopError) Unwrap() error { return e.Err }

// NoRetentionError is `crew prune` without flags on a state root whose
// crew.json sets no retention.
type NoRetentionError struct{ Path string }

func (e *NoRetentionError) Error() string {
	return "say what to prune: --older-than D, --keep N, or both; or configure retention with `crew init --retain N` and/or `--retain-for D` (" +
		e.Path + " sets none)"
}

// AmbiguousError is a run id prefix or short id that fits several runs.
type AmbiguousError struct {
	Arg        string
	Candidates []Candidate
	More       int
}

func (e *AmbiguousError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is ambiguous: it fits %d runs:", e.Arg, len(e.Candidates)+e.More)
	for _, c := range e.Candidates {
		fmt.Fprintf(&b, "\n  %s  %s  %s", c.ID, c.State, QuoteName(c.Task))
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "\n  and %d more", e.More)
	}
	b.WriteString("\ngive more of the id")
	return b.String()
}

// QuoteName quotes a task name if it has a space or a quote, so a list of
// them stays readable.
func QuoteName(s string) string {
	if strings.ContainsAny(s, " \t\"") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// ConfigError is a crew.json that cannot be used; it names the file and,
// for a file that is not valid config, the line and column, as compilers
// do: PATH:LINE:COL: message.
type ConfigError struct {
	Path string
	Err  error
	// Unreadable: the config could not be read at all (as opposed to read
	// and found invalid), so that rewriting it is no fix.
	Unreadable bool
}

func (e *ConfigError) Error() string {
	msg := e.Message()
	if e.Unreadable {
		return msg
	}
	return msg + "; fix it, or rewrite it with `crew init --max N` (which moves this file aside)"
}

// Message is the error without the hint: PATH:LINE:COL: message, or
// PATH: message where the place is not known.
func (e *ConfigError) Message() string {
	var syn *record.SyntaxError
	if errors.As(e.Err, &syn) && syn.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %v", e.Path, syn.Line, syn.Col, syn.Err)
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}

// Place is the 1-based line and column the error is at; zero if unknown.
func (e *ConfigError) Place() (line, col int) {
	var syn *record.SyntaxError
	if errors.As(e.Err, &syn) {
		return syn.Line, syn.Col
	}
	return 0, 0
}

func (e *ConfigError) Unwrap() error { return e.Err }

// Holder describes who holds the admission lock, as that holder wrote it.
type Holder struct {
	PID   int
	Host  string
	Since time.Time
}

func (h Holder) String() string {
	if h.PID == 0 {
		return "an unknown process (no holder note)"
	}
	return fmt.Sprintf("pid %d on host %s since %s", h.PID, h.Host, h.Since.UTC().Format(time.RFC3339))
}

// LockTimeoutError reports that the admission lock stayed busy too long.
type LockTimeoutError struct {
	Path     string // the store: a state root's path, an etcd store's URL
	LockFile string // the lock's file, where it is one ("" on etcd)
	Waited   time.Duration
	Holder   Holder
	HoldErr  error // why the holder note could not be read, if it could not
	// Lease: the lock goes with its holder's lease (etcd), rather than
	// with its process.
	Lease bool
	// Lost: the store takes no lock (etcd's admission is optimistic), and
	// this start tried Lost times, each time finding that another had
	// changed the store (Change, by Holder) before it could commit.
	Lost   int
	Change string
}

func (e *LockTimeoutError) Error() string {
	if e.Lost > 0 {
		return fmt.Sprintf("timed out after %s: admission on etcd store %s was tried %d times, and each time another "+
			"crew changed the store first (the last: %s, by %s); crew takes no admission lock on etcd: "+
			"try again, or raise --lock-timeout", e.Waited, e.Path, e.Lost, e.Change, e.Holder)
	}
	of, where, goes := "on the state root "+e.Path, "", "the lock is released when it exits"
	if e.LockFile != "" {
		where = " (lock file " + e.LockFile + ")"
	}
	if e.Lease {
		of, goes = "of etcd store "+e.Path, "the lock goes with its lease"
	}
	return fmt.Sprintf("timed out after %s waiting for the admission lock %s, held by %s%s; "+
		"if that process is stuck, stop it (%s), or raise --lock-timeout", e.Waited, of, e.Holder, where, goes)
}

// RefusedOnStoreError is a behaviour a store cannot offer, and why (the
// docs/etcd.md lists each): crew refuses it as a usage error.
type RefusedOnStoreError struct {
	What  string
	Where interface{ String() string }
	Why   string
}

func (e *RefusedOnStoreError) Error() string {
	return fmt.Sprintf("%s: not available on %s: %s", e.What, e.Where, e.Why)
}

// RemoteLogError is a run's log kept on another host: on a store shared by
// hosts, a run's log is where its supervisor ran.
type RemoteLogError struct {
	RunID record.RunID
	Host  string
}

func (e *RemoteLogError) Error() string {
	return fmt.Sprintf("run %s ran on host %s: its log is kept there, in that host's local state root (logs/%s.log); run crew logs on %s",
		e.RunID, e.Host, e.RunID, e.Host)
}
