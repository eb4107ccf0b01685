package record

// Liveness is what a backend can say about whether a process still works
// on something (a run's owner, its supervisor, a waiting start).
type Liveness int

const (
	// Dead: provably nobody (the lock is free, the lease is gone).
	Dead Liveness = iota
	// Alive: provably somebody.
	Alive
	// Unknown: the backend could not tell (an error probing). Every policy
	// treats it as Alive: a slot that might be held is held.
	Unknown
)

func (l Liveness) String() string {
	switch l {
	case Dead:
		return "dead"
	case Alive:
		return "alive"
	default:
		return "unknown"
	}
}

// MayLive is the one fail-closed reading of a liveness: anything but a
// proven Dead counts as alive.
func (l Liveness) MayLive() bool { return l != Dead }

// Owner is the liveness of a run's owner and of its supervisor. The owner
// holds the slot (on one machine: the lock every process of the run
// inherits); the supervisor is the crew process that records the run.
type Owner struct {
	Owner      Liveness
	Supervisor Liveness
	// Err says why a liveness is Unknown.
	Err error
}

// HoldsSlot reports whether a run in state st with this owner counts
// against the caps: active, and not provably dead.
func (o Owner) HoldsSlot(st State) bool { return st.Active() && o.Owner.MayLive() }

// Orphaned: the supervisor is provably gone while the owner may live (on
// one machine: the command still runs and holds the slot).
func (o Owner) Orphaned() bool { return o.Owner.MayLive() && o.Supervisor == Dead }

// FileID identifies a file by device and inode: what stays true of an open
// file however its name is changed.
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// LockIDs are the files of a run's locks as they were when the run was
// reserved, so that a lock file replaced under a living holder is noticed
// rather than mistaken for a free one.
type LockIDs struct {
	Owner      FileID `json:"owner"`
	Supervisor FileID `json:"supervisor"`
}
