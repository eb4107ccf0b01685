package admission

import (
	"testing"

	"github.com/crew-dev/crew/internal/record"
)

func TestDeadlock(t *testing.T) {
	alive := record.Alive
	parent, grand, other := run(1, "outer", "", alive), run(2, "grand", "", alive), run(3, "other", "", alive)
	inPool := run(4, "deployer", "deploy", alive)
	unreadable := Run{ID: id(9), Owner: record.Owner{Owner: alive}}
	chain := []record.RunID{id(1), id(2)} // nearest first
	cases := []struct {
		name      string
		cfg       record.Config
		runs      []Run
		cand      Candidate
		ancestors []record.RunID
		want      []record.RunID
	}{
		{"cap 1 held by the parent", cfg(1), []Run{parent}, Candidate{Task: "inner"}, chain, []record.RunID{id(1)}},
		{"no ancestors: never", cfg(1), []Run{parent}, Candidate{Task: "inner"}, nil, nil},
		{"same task as the parent", cfg(4), []Run{parent}, Candidate{Task: "outer"}, chain, []record.RunID{id(1)}},
		{"same task, forced: still the task", cfg(4), []Run{parent}, Candidate{Task: "outer", Force: true}, chain, []record.RunID{id(1)}},
		{"cap 1, forced: not blocked by the cap", cfg(1), []Run{parent}, Candidate{Task: "inner", Force: true}, chain, nil},
		{"cap 2 full of the chain, named nearest first", cfg(2), []Run{grand, parent}, Candidate{Task: "inner"}, chain, []record.RunID{id(1), id(2)}},
		{"cap 2, one unrelated run: it will end", cfg(2), []Run{parent, other}, Candidate{Task: "inner"}, chain, nil},
		{"cap 2, a slot free (owed to older waiters)", cfg(2), []Run{parent}, Candidate{Task: "inner"}, chain, nil},
		{"an unreadable record holds a slot: may end", cfg(2), []Run{parent, unreadable}, Candidate{Task: "inner"}, chain, nil},
		{"task held by an unrelated run", cfg(4), []Run{other}, Candidate{Task: "other"}, chain, nil},
		{"pool full of the parent", cfg(4, "deploy", 1), []Run{run(1, "outer", "deploy", alive), other},
			Candidate{Task: "inner", Pool: "deploy"}, chain, []record.RunID{id(1)}},
		{"pool full of someone else", cfg(4, "deploy", 1), []Run{parent, inPool}, Candidate{Task: "inner", Pool: "deploy"}, chain, nil},
		{"a dead parent holds nothing", cfg(1), []Run{run(1, "outer", "", record.Dead)}, Candidate{Task: "inner"}, chain, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Deadlock(c.cfg, Count(c.runs), c.cand, c.ancestors)
			var ids []record.RunID
			for _, h := range got {
				ids = append(ids, h.RunID)
			}
			if len(ids) != len(c.want) {
				t.Fatalf("Deadlock = %v, want %v", ids, c.want)
			}
			for i := range ids {
				if ids[i] != c.want[i] {
					t.Fatalf("Deadlock = %v, want %v", ids, c.want)
				}
			}
		})
	}
}
