// Package admission is crew's admission policy, and nothing else: pure
// functions from what the active set and the queue hold to a decision.
// It does no I/O and keeps no state, so every caller (admission inside the
// lock, the queue's wake-ups, the "why" of crew status) decides the same
// way, and a table test covers every rule in microseconds.
package admission

import (
	"time"

	"github.com/crew-dev/crew/internal/record"
)

// Run is one entry of the active set as admission sees it: its record (nil
// if unreadable) and whether its owner lives.
type Run struct {
	ID    record.RunID
	Rec   *record.Run
	Owner record.Owner
}

// Holder is a run that holds a slot.
type Holder struct {
	RunID record.RunID
	Task  string // "(unreadable record)" for a record that cannot be read
	State record.State
	Since time.Time
	PID   int
	Pool  string
}

// Usage is what the active set holds right now. It is derived from the
// records and their owners' liveness every time; nothing here is stored,
// so nothing can drift.
type Usage struct {
	InUse   int
	PoolUse map[string]int
	Holders []Holder
	ByTask  map[string]Holder
}

// UnreadableTask names the task of a record that cannot be read.
const UnreadableTask = "(unreadable record)"

// Count derives the usage of the active set. A run holds a slot while it
// is active and its owner may live: a run whose owner is provably gone
// holds none, and one whose owner cannot be probed holds one (fail
// closed). An unreadable record holds a slot on the same terms: counted
// while its owner may live, so a corrupt file can never let a second run
// in beside a living one.
func Count(runs []Run) Usage {
	// Sized for every run holding a slot under a task of its own (admission
	// counts the whole active set on every pass, and growing these was
	// most of the time Count took at 200 runs). Holders stays nil while no
	// run holds a slot, as it always has.
	u := Usage{PoolUse: map[string]int{}, ByTask: make(map[string]Holder, len(runs))}
	hold := func(h Holder) {
		if u.Holders == nil {
			u.Holders = make([]Holder, 0, len(runs))
		}
		u.Holders = append(u.Holders, h)
	}
	for _, r := range runs {
		switch {
		case r.Rec == nil:
			if r.ID != "" && r.Owner.Owner.MayLive() {
				u.InUse++
				hold(Holder{RunID: r.ID, Task: UnreadableTask})
			}
		case r.Owner.HoldsSlot(r.Rec.State):
			h := Holder{RunID: r.ID, Task: r.Rec.Task, State: r.Rec.State, Since: r.Rec.CreatedAt,
				PID: r.Rec.SupervisorPID, Pool: r.Rec.Pool}
			u.InUse++
			if h.Pool != "" {
				u.PoolUse[h.Pool]++
			}
			hold(h)
			u.ByTask[h.Task] = h
		}
	}
	return u
}

// Fits reports whether one more run of pool fits under the caps.
func Fits(cfg record.Config, u Usage, pool string) bool {
	if u.InUse >= cfg.MaximumInProgress {
		return false
	}
	return pool == "" || u.PoolUse[pool] < cfg.Pools[pool]
}

// Oldest is the longest-held slot, if any slot is held by a readable run.
func (u Usage) Oldest() *Holder {
	var oldest *Holder
	for i := range u.Holders {
		h := &u.Holders[i]
		if h.Task != UnreadableTask && (oldest == nil || h.Since.Before(oldest.Since)) {
			oldest = h
		}
	}
	return oldest
}
