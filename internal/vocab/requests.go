package vocab

import (
	"io"
	"os"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/record"
)

// AdmitRequest asks for a slot for one run of Task.
type AdmitRequest struct {
	Task    string
	Command []string
	Dir     string
	// Pool is a configured pool whose cap the run also needs a slot in.
	Pool string
	// Force admits past the caps and the queue (never past the task's own
	// active run).
	Force bool
	// LockTimeout bounds each wait for the admission lock.
	LockTimeout time.Duration
	// Wait joins the queue instead of refusing, for at most WaitTimeout
	// (zero: no limit).
	Wait        bool
	WaitTimeout time.Duration
	// OnWait, if set, hears about the wait: once when the run joins the
	// queue, after every re-evaluation, and once when it is admitted.
	OnWait func(WaitProgress)
	// LogMax caps the run's log in bytes; 0: crew.json's logMax;
	// LogMaxNone: no cap.
	LogMax int64
	// Timeout, Retries and RetryDelay go into the run's record, where its
	// supervisor (foreground or detached) reads them: crew start
	// --timeout (per attempt), --retries, --retry-delay.
	Timeout    time.Duration
	Retries    int
	RetryDelay time.Duration
	// Parent is the run whose command called this crew start
	// (CREW_RUN_ID), if any: a start that could only wait for its own
	// ancestors is refused with a *NestedDeadlockError.
	Parent record.RunID
	// Labels go into the run's record and its queue ticket (crew start
	// --label), for status, history and wait to select runs by.
	Labels record.Labels
}

// StartRequest is one `crew start`.
type StartRequest struct {
	AdmitRequest
	// Grace is how long the command's process group has between the
	// forwarded signal and SIGKILL.
	Grace time.Duration
	// Stdin, Stdout and Stderr are the command's streams; Stdout and
	// Stderr are also copied to the run's log file.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Env is the command's environment before crew adds CREW_RUN_ID,
	// CREW_TASK and CREW_ROOT.
	Env []string
	// Signals delivers the stop signals crew received (SIGINT, SIGTERM,
	// SIGHUP); they are forwarded to the command's process group.
	Signals <-chan os.Signal
	// Warn receives warnings for the user (stderr), as errors so that
	// crew's own line breaks (errors.Join) can be told from text in the
	// state root; Note, crew's other lines about the run (a retry).
	Warn func(error)
	Note func(string)
	// Detach hands the run to a supervisor process of its own and returns
	// once the command is running. With Wait, a start that is not admitted
	// at once returns as soon as it is in line: a background waiter of its
	// own waits in its place, then supervises the run as a detached
	// supervisor does; OnQueued then hears where the start stands in line.
	Detach   bool
	OnQueued func(WaitProgress)
	// WaiterArgs are flags of crew start's own that its background waiter
	// is started with (--refused-exit: the exit code its record gives a
	// start whose --wait=D runs out).
	WaiterArgs []string
	// Tag prefixes each line of the command's output on Stdout and Stderr
	// with the task's name and a tab (crew start --tag); the log keeps the
	// output as it was written.
	Tag bool
	// NoPTY keeps the command on pipes on an interactive terminal
	// (crew start --no-pty).
	NoPTY bool
}

// StopOptions configures Stop.
type StopOptions struct {
	Signal syscall.Signal
	Grace  time.Duration
}

// HistoryQuery selects the finished runs crew history shows.
type HistoryQuery struct {
	Task   string    // only this task's runs ("" for all)
	Failed bool      // only runs that did not succeed
	Since  time.Time // only runs that finished at or after it
	Limit  int       // at most this many (0: all)
	// Labels keeps only runs that carry every one of them.
	Labels record.Labels
}

// StatusQuery selects the runs crew status shows: those of Task ("" for
// all) that carry every one of Labels.
type StatusQuery struct {
	Task   string
	Labels record.Labels
}

// Selects reports whether a run of task with these labels is one q shows.
func (q StatusQuery) Selects(task string, labels record.Labels) bool {
	return (q.Task == "" || task == q.Task) && labels.Has(q.Labels)
}

// PoolChange sets a pool's cap; a cap of 0 removes the pool.
type PoolChange struct {
	Name string
	Max  int
}

// ConfigChange is one change `crew init` makes to crew.json besides the
// cap and the pools.
type ConfigChange func(*record.Config)

// SetRetain sets how many finished runs to keep; 0 removes the limit.
func SetRetain(n int) ConfigChange { return func(c *record.Config) { c.Retain = n } }

// SetRetainFor sets how long finished runs are kept; 0 removes the limit.
func SetRetainFor(d time.Duration) ConfigChange { return func(c *record.Config) { c.RetainFor = d } }

// SetLogMax sets the default log cap; 0 removes it.
func SetLogMax(n int64) ConfigChange { return func(c *record.Config) { c.LogMax = n } }

// LogMaxNone, as AdmitRequest.LogMax, asks for a log without a cap
// whatever crew.json says; 0 there means crew.json's logMax.
const LogMaxNone = -1

// WaitProgress tells a waiting start where it stands.
type WaitProgress struct {
	RunID     record.RunID
	Task      string
	Admitted  bool
	Position  int // 1-based place in line
	Reason    admission.Reason
	InUse     int
	Maximum   int
	Pool      string
	PoolInUse int
	PoolMax   int
	// Oldest is the longest-running run holding a slot, if any.
	Oldest *admission.Holder
	// BlockingRun is the task's own active run, when that is the reason.
	BlockingRun *admission.Holder
	Since       time.Time
	// ConfigErr, if set, is why nothing can be admitted: crew.json is
	// unusable. The waiter keeps its place and retries.
	ConfigErr string
	// QueueErr, if set, is why nothing can be decided: the queue cannot
	// be listed. The waiter keeps its place and retries.
	QueueErr string
}
