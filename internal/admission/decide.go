package admission

import (
	"time"

	"github.com/crew-dev/crew/internal/record"
)

// Ticket is a waiting start in the queue, as admission sees it. Only
// tickets whose waiters live are given to Decide and Plan.
type Ticket struct {
	ID    record.RunID
	Task  string
	Pool  string
	Since time.Time
	// Unreadable: the ticket's file cannot be read, but its waiter lives.
	// It keeps its place in line (fail closed) with its task and pool
	// unknown: it is owed a slot of the global cap and of every pool, and
	// it holds back no task. Its own waiter knows its task and pool.
	Unreadable bool
}

// Reason says what a start that may not go now waits for.
type Reason string

const (
	WaitSlot Reason = "slot" // the global cap
	WaitPool Reason = "pool" // its pool's cap
	WaitTask Reason = "task" // its task's active run, or an older waiting start of the task
	// WaitConfig: crew.json is unusable, so nothing can be decided until
	// it is fixed.
	WaitConfig Reason = "config"
	// WaitQueue: the queue cannot be listed, so nothing can be decided
	// until it can.
	WaitQueue Reason = "queue"
)

// Candidate is the start being decided: a newcomer (Ticket empty), who
// lines up behind every waiting start, or the waiter of Ticket.
type Candidate struct {
	Ticket record.RunID
	Task   string
	Pool   string
	// Force admits past the caps and the queue, never past the task's
	// own active run.
	Force bool
}

// Verdict is the decision for one candidate.
type Verdict struct {
	Admit bool
	// Forced: admitted with --force although the caps were reached.
	Forced bool
	Reason Reason
	// Position is the 1-based place in line among waiting starts
	// (newcomers: one past the end); Ahead is how many wait before it.
	Position, Ahead int
	// BlockingRun is the task's active run (Reason WaitTask).
	BlockingRun *Holder
	// BlockingTicket is an older waiting start of the task (Reason
	// WaitTask, no BlockingRun).
	BlockingTicket record.RunID
	// QueueAhead: a slot is free, but older waiting starts get it first.
	QueueAhead bool
}

// Decide is the queue discipline. Capacity goes to waiting starts in
// arrival order; one that cannot run because of its task or its pool does
// not hold up younger ones that can (no head-of-line blocking), and the
// older of two waiting starts of one task goes first. A newcomer lines up
// behind every waiting start; --force skips the line and the caps, but
// never a task's active run.
func Decide(cfg record.Config, u Usage, queue []Ticket, c Candidate) Verdict {
	if c.Force && c.Ticket == "" {
		if h, ok := u.ByTask[c.Task]; ok {
			return Verdict{Reason: WaitTask, BlockingRun: &h}
		}
		return Verdict{Admit: true, Forced: !Fits(cfg, u, c.Pool)}
	}
	sim := newSimulation(cfg, u)
	for i, t := range queue {
		if t.ID == c.Ticket {
			v := sim.block(c.Task, c.Pool) // its ticket's, even where that cannot be read
			v.Position, v.Ahead = i+1, i
			return v
		}
		sim.visit(t)
	}
	v := sim.block(c.Task, c.Pool)
	v.Position, v.Ahead = len(queue)+1, len(queue)
	if (v.Reason == WaitSlot || v.Reason == WaitPool) && Fits(cfg, u, c.Pool) {
		v.QueueAhead = true
	}
	return v
}

// Plan decides for every waiting start at once, in arrival order: which
// may be admitted now (whose bells to ring) and what each other one waits
// for (the "why" of crew status).
func Plan(cfg record.Config, u Usage, queue []Ticket) []Verdict {
	sim := newSimulation(cfg, u)
	out := make([]Verdict, len(queue))
	for i, t := range queue {
		v := sim.blockTicket(t)
		v.Position, v.Ahead = i+1, i
		sim.visit(t)
		out[i] = v
	}
	return out
}

// Full reports whether the waiting starts of queue, a beginning of the
// line in arrival order, take every slot Plan would give: no start behind
// them could be admitted, so a ring need read no further.
func Full(cfg record.Config, u Usage, queue []Ticket) bool {
	sim := newSimulation(cfg, u)
	for _, t := range queue {
		sim.visit(t)
	}
	return sim.inUse >= cfg.MaximumInProgress
}

// simulation hands out capacity to tickets in arrival order.
type simulation struct {
	cfg     record.Config
	inUse   int
	poolUse map[string]int
	runs    map[string]Holder       // tasks with an active run
	claimed map[string]record.RunID // tasks with an older ticket in line
}

func newSimulation(cfg record.Config, u Usage) *simulation {
	pu := make(map[string]int, len(u.PoolUse))
	for k, n := range u.PoolUse {
		pu[k] = n
	}
	return &simulation{cfg: cfg, inUse: u.InUse, poolUse: pu, runs: u.ByTask, claimed: map[string]record.RunID{}}
}

// block says whether a start of task in pool could go now.
func (s *simulation) block(task, pool string) Verdict {
	if h, ok := s.runs[task]; ok {
		return Verdict{Reason: WaitTask, BlockingRun: &h}
	}
	if id, ok := s.claimed[task]; ok {
		return Verdict{Reason: WaitTask, BlockingTicket: id}
	}
	if s.inUse >= s.cfg.MaximumInProgress {
		return Verdict{Reason: WaitSlot}
	}
	if pool != "" {
		if limit, ok := s.cfg.Pools[pool]; ok && s.poolUse[pool] >= limit {
			return Verdict{Reason: WaitPool}
		}
	}
	return Verdict{Admit: true}
}

// blockTicket is block for a waiting start: one whose ticket cannot be
// read is held back by the global cap alone (whether its task or pool
// holds it back, only its waiter can tell, deciding for itself).
func (s *simulation) blockTicket(t Ticket) Verdict {
	if t.Unreadable {
		if s.inUse >= s.cfg.MaximumInProgress {
			return Verdict{Reason: WaitSlot}
		}
		return Verdict{Admit: true}
	}
	return s.block(t.Task, t.Pool)
}

// visit places a ticket: it takes capacity if it can, and either way keeps
// younger tickets of its task behind it. An unreadable ticket takes a
// slot of the global cap and one of every pool with room, since it may
// be of any pool, and keeps no task behind it.
func (s *simulation) visit(t Ticket) {
	if t.Unreadable {
		if s.blockTicket(t).Admit {
			s.inUse++
			for pool, limit := range s.cfg.Pools {
				if s.poolUse[pool] < limit {
					s.poolUse[pool]++
				}
			}
		}
		return
	}
	if s.block(t.Task, t.Pool).Admit {
		s.inUse++
		if t.Pool != "" {
			s.poolUse[t.Pool]++
		}
	}
	if _, ok := s.claimed[t.Task]; !ok {
		s.claimed[t.Task] = t.ID
	}
}
