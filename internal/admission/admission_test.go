package admission

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func id(n int) record.RunID {
	return record.RunID(fmt.Sprintf("r-20261129T100000.%09dZ-%016x", n, n))
}

// run is an active record of task (in pool, if given) with an owner of
// the given liveness.
func run(n int, task, pool string, owner record.Liveness) Run {
	return Run{ID: id(n), Rec: &record.Run{RunID: id(n), Task: task, Pool: pool, State: record.Running,
		CreatedAt: t0.Add(time.Duration(n) * time.Second), SupervisorPID: 1000 + n},
		Owner: record.Owner{Owner: owner, Supervisor: owner}}
}

func cfg(max int, pools ...any) record.Config {
	c := record.Config{Version: 1, MaximumInProgress: max}
	for i := 0; i+1 < len(pools); i += 2 {
		if c.Pools == nil {
			c.Pools = map[string]int{}
		}
		c.Pools[pools[i].(string)] = pools[i+1].(int)
	}
	return c
}

func tk(n int, task, pool string) Ticket { return Ticket{ID: id(n), Task: task, Pool: pool} }

// unreadable is a ticket whose file cannot be read, of a living waiter.
func unreadable(n int) Ticket { return Ticket{ID: id(n), Unreadable: true} }

func TestCount(t *testing.T) {
	unreadable := Run{ID: id(9), Owner: record.Owner{Owner: record.Alive}}
	deadUnreadable := Run{ID: id(10), Owner: record.Owner{Owner: record.Dead}}
	foreign := Run{Owner: record.Owner{Owner: record.Alive}} // no run id
	orphan := run(4, "orphan", "", record.Alive)
	orphan.Owner.Supervisor = record.Dead
	finishing := run(5, "finishing", "", record.Alive)
	finishing.Rec.State = record.Succeeded
	unknown := run(6, "unknown", "deploy", record.Unknown)
	unknown.Owner.Err = errors.New("probe failed")

	u := Count([]Run{
		run(1, "a", "", record.Alive),
		run(2, "b", "deploy", record.Alive),
		run(3, "dead", "", record.Dead),
		orphan, finishing, unknown, unreadable, deadUnreadable, foreign,
	})
	if u.InUse != 5 {
		t.Errorf("InUse = %d, want 5 (a, b, orphan, unknown, unreadable): %+v", u.InUse, u.Holders)
	}
	if u.PoolUse["deploy"] != 2 {
		t.Errorf("PoolUse[deploy] = %d, want 2 (b, and the one whose owner cannot be probed)", u.PoolUse["deploy"])
	}
	for _, task := range []string{"a", "b", "orphan", "unknown"} {
		if _, ok := u.ByTask[task]; !ok {
			t.Errorf("ByTask lacks %q", task)
		}
	}
	for _, task := range []string{"dead", "finishing"} {
		if _, ok := u.ByTask[task]; ok {
			t.Errorf("ByTask has %q, which holds no slot", task)
		}
	}
	if o := u.Oldest(); o == nil || o.Task != "a" {
		t.Errorf("Oldest = %+v, want task a", o)
	}
	// No holder, no Holders (nil, not empty), however many runs.
	for _, runs := range [][]Run{nil, {run(3, "dead", "", record.Dead), finishing, deadUnreadable}} {
		if u := Count(runs); u.InUse != 0 || u.Holders != nil || len(u.ByTask) != 0 {
			t.Errorf("Count(%d runs that hold no slot) = %+v, want nothing held and nil Holders", len(runs), u)
		}
	}
}

// BenchmarkCount counts 200 living runs of 200 tasks, what admission
// counts on every pass at 200 active runs.
func BenchmarkCount(b *testing.B) {
	var runs []Run
	for i := range 200 {
		runs = append(runs, run(i+1, fmt.Sprintf("task-%d", i), []string{"", "deploy"}[i%2], record.Alive))
	}
	for b.Loop() {
		if u := Count(runs); u.InUse != 200 {
			b.Fatalf("InUse = %d, want 200", u.InUse)
		}
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name  string
		cfg   record.Config
		runs  []Run
		queue []Ticket
		cand  Candidate
		want  Verdict
	}{
		{name: "free slot", cfg: cfg(2), runs: []Run{run(1, "a", "", record.Alive)},
			cand: Candidate{Task: "b"}, want: Verdict{Admit: true, Position: 1}},
		{name: "cap reached", cfg: cfg(1), runs: []Run{run(1, "a", "", record.Alive)},
			cand: Candidate{Task: "b"}, want: Verdict{Reason: WaitSlot, Position: 1}},
		{name: "dead run holds no slot", cfg: cfg(1), runs: []Run{run(1, "a", "", record.Dead)},
			cand: Candidate{Task: "b"}, want: Verdict{Admit: true, Position: 1}},
		{name: "unknown owner holds its slot", cfg: cfg(1), runs: []Run{run(1, "a", "", record.Unknown)},
			cand: Candidate{Task: "b"}, want: Verdict{Reason: WaitSlot, Position: 1}},
		{name: "same task is running", cfg: cfg(4), runs: []Run{run(1, "a", "", record.Alive)},
			cand: Candidate{Task: "a"}, want: Verdict{Reason: WaitTask, Position: 1, BlockingRun: &Holder{RunID: id(1)}}},
		{name: "same task's dead run is no obstacle", cfg: cfg(4), runs: []Run{run(1, "a", "", record.Dead)},
			cand: Candidate{Task: "a"}, want: Verdict{Admit: true, Position: 1}},
		{name: "pool full, global cap free", cfg: cfg(4, "deploy", 1), runs: []Run{run(1, "a", "deploy", record.Alive)},
			cand: Candidate{Task: "b", Pool: "deploy"}, want: Verdict{Reason: WaitPool, Position: 1}},
		{name: "pool free, global cap full", cfg: cfg(1, "deploy", 1), runs: []Run{run(1, "a", "", record.Alive)},
			cand: Candidate{Task: "b", Pool: "deploy"}, want: Verdict{Reason: WaitSlot, Position: 1}},
		{name: "no pool ignores pool caps", cfg: cfg(4, "deploy", 1), runs: []Run{run(1, "a", "deploy", record.Alive)},
			cand: Candidate{Task: "b"}, want: Verdict{Admit: true, Position: 1}},
		{name: "force past the cap", cfg: cfg(1), runs: []Run{run(1, "a", "", record.Alive)},
			cand: Candidate{Task: "b", Force: true}, want: Verdict{Admit: true, Forced: true}},
		{name: "force past a full pool", cfg: cfg(4, "deploy", 1), runs: []Run{run(1, "a", "deploy", record.Alive)},
			cand: Candidate{Task: "b", Pool: "deploy", Force: true}, want: Verdict{Admit: true, Forced: true}},
		{name: "force where it fits is not forced", cfg: cfg(2), runs: []Run{run(1, "a", "", record.Alive)},
			cand: Candidate{Task: "b", Force: true}, want: Verdict{Admit: true}},
		{name: "force skips the queue", cfg: cfg(1), queue: []Ticket{tk(5, "w", "")},
			cand: Candidate{Task: "b", Force: true}, want: Verdict{Admit: true}},
		{name: "force never passes the task's own run", cfg: cfg(4), runs: []Run{run(1, "a", "", record.Alive)},
			cand: Candidate{Task: "a", Force: true}, want: Verdict{Reason: WaitTask, BlockingRun: &Holder{RunID: id(1)}}},
		{name: "newcomer lines up behind a waiter", cfg: cfg(2), runs: []Run{run(1, "a", "", record.Alive)},
			queue: []Ticket{tk(5, "w", "")},
			cand:  Candidate{Task: "b"}, want: Verdict{Reason: WaitSlot, QueueAhead: true, Position: 2, Ahead: 1}},
		{name: "newcomer gets what the waiters leave", cfg: cfg(3), runs: []Run{run(1, "a", "", record.Alive)},
			queue: []Ticket{tk(5, "w", "")},
			cand:  Candidate{Task: "b"}, want: Verdict{Admit: true, Position: 2, Ahead: 1}},
		{name: "first waiter goes first", cfg: cfg(2), runs: []Run{run(1, "a", "", record.Alive)},
			queue: []Ticket{tk(5, "w1", ""), tk(6, "w2", "")},
			cand:  Candidate{Ticket: id(5), Task: "w1"}, want: Verdict{Admit: true, Position: 1}},
		{name: "second waiter waits for the slot the first gets", cfg: cfg(2), runs: []Run{run(1, "a", "", record.Alive)},
			queue: []Ticket{tk(5, "w1", ""), tk(6, "w2", "")},
			cand:  Candidate{Ticket: id(6), Task: "w2"}, want: Verdict{Reason: WaitSlot, Position: 2, Ahead: 1}},
		{name: "no head-of-line blocking by a busy task", cfg: cfg(2), runs: []Run{run(1, "a", "", record.Alive)},
			queue: []Ticket{tk(5, "a", ""), tk(6, "w2", "")},
			cand:  Candidate{Ticket: id(6), Task: "w2"}, want: Verdict{Admit: true, Position: 2, Ahead: 1}},
		{name: "no head-of-line blocking by a full pool", cfg: cfg(3, "deploy", 1), runs: []Run{run(1, "a", "deploy", record.Alive)},
			queue: []Ticket{tk(5, "d", "deploy"), tk(6, "w2", "")},
			cand:  Candidate{Ticket: id(6), Task: "w2"}, want: Verdict{Admit: true, Position: 2, Ahead: 1}},
		{name: "older waiter of the same task goes first", cfg: cfg(4),
			queue: []Ticket{tk(5, "t", ""), tk(6, "t", "")},
			cand:  Candidate{Ticket: id(6), Task: "t"}, want: Verdict{Reason: WaitTask, BlockingTicket: id(5), Position: 2, Ahead: 1}},
		{name: "newcomer behind a waiter of its task", cfg: cfg(4),
			queue: []Ticket{tk(5, "t", "")},
			cand:  Candidate{Task: "t"}, want: Verdict{Reason: WaitTask, BlockingTicket: id(5), Position: 2, Ahead: 1}},
		// Issue 23, item 12: an unreadable ticket of a living waiter keeps
		// its place in line.
		{name: "newcomer lines up behind an unreadable ticket", cfg: cfg(2), runs: []Run{run(1, "a", "", record.Alive)},
			queue: []Ticket{unreadable(5)},
			cand:  Candidate{Task: "b"}, want: Verdict{Reason: WaitSlot, QueueAhead: true, Position: 2, Ahead: 1}},
		{name: "an unreadable ticket's waiter decides as itself", cfg: cfg(2), runs: []Run{run(1, "a", "", record.Alive)},
			queue: []Ticket{unreadable(5), tk(6, "w2", "")},
			cand:  Candidate{Ticket: id(5), Task: "w1"}, want: Verdict{Admit: true, Position: 1}},
		{name: "an unreadable ticket's waiter is held back by its task", cfg: cfg(2), runs: []Run{run(1, "a", "", record.Alive)},
			queue: []Ticket{unreadable(5)},
			cand:  Candidate{Ticket: id(5), Task: "a"}, want: Verdict{Reason: WaitTask, Position: 1, BlockingRun: &Holder{RunID: id(1)}}},
		{name: "a waiter behind an unreadable ticket", cfg: cfg(2), runs: []Run{run(1, "a", "", record.Alive)},
			queue: []Ticket{unreadable(5), tk(6, "w2", "")},
			cand:  Candidate{Ticket: id(6), Task: "w2"}, want: Verdict{Reason: WaitSlot, Position: 2, Ahead: 1}},
		{name: "an unreadable ticket is owed a slot of every pool", cfg: cfg(3, "deploy", 1),
			queue: []Ticket{unreadable(5)},
			cand:  Candidate{Task: "b", Pool: "deploy"}, want: Verdict{Reason: WaitPool, QueueAhead: true, Position: 2, Ahead: 1}},
		{name: "an unreadable ticket holds back no task", cfg: cfg(4),
			queue: []Ticket{unreadable(5), unreadable(6)},
			cand:  Candidate{Task: "t"}, want: Verdict{Admit: true, Position: 3, Ahead: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.cfg, Count(tc.runs), tc.queue, tc.cand)
			if got.Admit != tc.want.Admit || got.Forced != tc.want.Forced || got.Reason != tc.want.Reason ||
				got.Position != tc.want.Position || got.Ahead != tc.want.Ahead || got.QueueAhead != tc.want.QueueAhead ||
				got.BlockingTicket != tc.want.BlockingTicket {
				t.Errorf("Decide = %+v\nwant       %+v", got, tc.want)
			}
			switch {
			case tc.want.BlockingRun == nil && got.BlockingRun != nil:
				t.Errorf("BlockingRun = %+v, want none", got.BlockingRun)
			case tc.want.BlockingRun != nil && (got.BlockingRun == nil || got.BlockingRun.RunID != tc.want.BlockingRun.RunID):
				t.Errorf("BlockingRun = %+v, want run %s", got.BlockingRun, tc.want.BlockingRun.RunID)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	c := cfg(3, "deploy", 1)
	u := Count([]Run{run(1, "busy", "", record.Alive), run(2, "d0", "deploy", record.Alive)})
	queue := []Ticket{
		tk(5, "d1", "deploy"), // pool full
		tk(6, "busy", ""),     // task running
		tk(7, "x", ""),        // gets the last slot
		tk(8, "x", ""),        // behind the older x
		tk(9, "y", ""),        // no slot left
	}
	got := Plan(c, u, queue)
	want := []struct {
		admit  bool
		reason Reason
	}{{false, WaitPool}, {false, WaitTask}, {true, ""}, {false, WaitTask}, {false, WaitSlot}}
	for i, w := range want {
		if got[i].Admit != w.admit || got[i].Reason != w.reason || got[i].Position != i+1 {
			t.Errorf("Plan[%d] (%s) = %+v, want admit=%v reason=%q position %d", i, queue[i].Task, got[i], w.admit, w.reason, i+1)
		}
	}
	// Plan agrees with Decide for each waiter.
	for i, q := range queue {
		d := Decide(c, u, queue, Candidate{Ticket: q.ID, Task: q.Task, Pool: q.Pool})
		if d.Admit != got[i].Admit || d.Reason != got[i].Reason {
			t.Errorf("Decide for %s = %+v, Plan says %+v", q.Task, d, got[i])
		}
	}
}

// An unreadable ticket is rung when a slot of the global cap is left for
// it (its waiter then decides for itself), and takes that slot from
// younger waiters.
func TestPlanUnreadable(t *testing.T) {
	c := cfg(2)
	u := Count([]Run{run(1, "busy", "", record.Alive)})
	got := Plan(c, u, []Ticket{unreadable(5), unreadable(6), tk(7, "x", "")})
	want := []struct {
		admit  bool
		reason Reason
	}{{true, ""}, {false, WaitSlot}, {false, WaitSlot}}
	for i, w := range want {
		if got[i].Admit != w.admit || got[i].Reason != w.reason || got[i].Position != i+1 {
			t.Errorf("Plan[%d] = %+v, want admit=%v reason=%q position %d", i, got[i], w.admit, w.reason, i+1)
		}
	}
}
