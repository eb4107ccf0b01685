package failpoint

// Name is a failpoint. The names are the variables below and nothing else:
// Hit, Skip and Error take a Name, so crew's code cannot mistype one, and
// a failpoints build refuses to run with a CREW_FAILPOINT that names
// anything that is not in Points, or gives a point an action its kind does
// not take, so a test cannot mistype one either.
//
// In a build without the failpoints tag nothing refers to these at run
// time, and the linker drops them.
type Name struct{ name string }

func (n Name) String() string { return n.name }

// Kind is what a failpoint can do.
type Kind int

const (
	// Step is a point in a run's life: kill, wait or panic there (Hit).
	Step Kind = iota
	// Guard is a safety mechanism a test may compile out (Skip), to prove
	// that it catches its absence.
	Guard
	// Fault is a step that can be made to fail with an errno (Error).
	Fault
)

// The failpoints, in the order of a run's life.
var (
	AdmissionLock      = Name{"admission-lock"}
	AdmissionContended = Name{"admission-contended"}
	AdmissionLocked    = Name{"admission-locked"}
	QueueList          = Name{"queue-list"}
	OwnerLocked        = Name{"owner-locked"}
	UpgradeWrite       = Name{"upgrade-write"}
	Reserved           = Name{"reserved"}
	StopSignal         = Name{"stop-signal"}
	Admitted           = Name{"admitted"}
	DetachHandover     = Name{"detach-handover"}
	Adopted            = Name{"adopted"}
	QueuePoll          = Name{"queue-poll"}
	PTYOpen            = Name{"pty-open"}
	GuardStarted       = Name{"guard-started"}
	GuardJoined        = Name{"guard-joined"}
	GuardExited        = Name{"guard-exited"}
	ForkExec           = Name{"fork-exec"}
	Launched           = Name{"launched"}
	Exited             = Name{"exited"}
	FinishWrite        = Name{"finish-write"}
	FinalSynced        = Name{"final-synced"}
	IndexAppend        = Name{"index-append"}
	Indexed            = Name{"indexed"}
	Finalized          = Name{"finalized"}
	LazyPrune          = Name{"lazy-prune"}
	PruneLogRemoved    = Name{"prune-log-removed"}
	QueueWoken         = Name{"queue-woken"}
	WaiterHandover     = Name{"waiter-handover"}
	WaitPoll           = Name{"wait-poll"}
	Fence              = Name{"fence"}
	RecoverLocked      = Name{"recover-locked"}
	Resolving          = Name{"resolving"}
)

// Point is a failpoint, its kind, and where it is.
type Point struct {
	Name  Name
	Kind  Kind
	Where string
}

// Points is every failpoint crew has: the table of failpoints in docs/failpoints.md is
// this list (a test holds the two equal).
var Points = []Point{
	{AdmissionLock, Guard, "admission without its lock (on etcd: without the fence of its commit) (`skip`)"},
	{AdmissionContended, Step, "the admission lock is busy; about to wait for it"},
	{AdmissionLocked, Step, "admission lock taken, records not yet read (on etcd: the store read, nothing committed yet)"},
	{QueueList, Fault, "the queue's tickets are listed (`error:` makes the listing fail)"},
	{OwnerLocked, Step, "new run's owner lock taken, record not yet written"},
	{UpgradeWrite, Fault, "the first reservation on a version 1 root is about to write crew.json at version 2 (`error:` makes the write fail)"},
	{Reserved, Step, "provisioning record durable, admission lock not yet released"},
	{StopSignal, Step, "crew start took a stop signal that came while it was being admitted"},
	{Admitted, Step, "admission lock released, command not yet started"},
	{DetachHandover, Step, "`--detach`: the background supervisor started and holds the locks; the parent has not exited"},
	{Adopted, Step, "`--detach`: the background supervisor took the run over from its parent; the command has not started"},
	{PTYOpen, Fault, "the command's pseudo-terminal is opened (`error:` makes it fail)"},
	{GuardStarted, Step, "on etcd: the attempt's lease guard runs; the command not yet started into its group"},
	{ForkExec, Fault, "about to start the command (`error:` makes the start fail as fork/exec would)"},
	{GuardJoined, Step, "on etcd: the command started into its lease guard's group; the guard not yet asked to confirm"},
	{GuardExited, Step, "on etcd: a lease guard exited; its supervisor has not reaped it yet (the group's id is still pinned)"},
	{Launched, Step, "command started, record not yet `running`"},
	{Exited, Step, "command exited, final record not yet written"},
	{FinishWrite, Fault, "about to write a run's final record (`error:ENOSPC` is a full disk)"},
	{FinalSynced, Step, "final record durable in the run's own file in runs/active, not yet moved into runs/done"},
	{IndexAppend, Fault, "a finished run's entry is appended to the index of finished runs (`error:` makes the write fail)"},
	{Indexed, Step, "final record durable in runs/active and entered in the index of finished runs, not yet moved into runs/done"},
	{Finalized, Step, "final record written, not yet out of the active set, owner lock still held"},
	{LazyPrune, Step, "a finishing run (its record final, its slot free) is about to remove an expired run"},
	{PruneLogRemoved, Step, "a prune (`crew prune`, or a finishing run's lazy prune) removed a run's log, not yet its record"},
	{QueueWoken, Step, "a waiting start woke up (bell or poll), about to try admission again"},
	{WaiterHandover, Step, "`--detach --wait`: the background waiter took over the place in line; the parent has not let go of it"},
	{WaitPoll, Step, "`crew wait` (or `crew logs -f`) has looked at its run once and is between two looks"},
	{Fence, Guard, "finalizing a dead run without taking its locks (`skip`)"},
	{QueuePoll, Guard, "a waiting start without its fallback poll (`skip`): it wakes only when told"},
	{RecoverLocked, Step, "a recoverer (or admission) holds a dead run's locks, record not yet re-read"},
	{Resolving, Step, "a RUN or TASK argument is being looked up: the line read, the runs not yet"},
}

// Actions are the actions each kind takes in CREW_FAILPOINT.
var Actions = map[Kind][]string{
	Step:  {"kill", "wait", "panic"},
	Guard: {"skip"},
	Fault: {"error"},
}
