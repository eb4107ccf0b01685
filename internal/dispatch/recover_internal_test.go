package dispatch

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// An orphan's report names the processes shown holding its slot, or says
// why they cannot be shown; without a way to look, it says nothing of them.
func TestOrphanNamesItsHolders(t *testing.T) {
	rec := &record.Run{RunID: "r-1", Task: "t", SupervisorPID: 4711, Host: "h"}
	unsupported := errors.New("darwin has no /proc and no pidfds, so crew cannot prove which processes hold a run's lock")
	cases := []struct {
		name    string
		holders func(record.RunID) ([]int, error)
		pids    []int
		unknown string
		reason  string
	}{
		{"one", func(record.RunID) ([]int, error) { return []int{5001}, nil }, []int{5001}, "",
			"the command (its start was not recorded) still runs and holds the slot (pid 5001 holds it); left running"},
		{"several", func(record.RunID) ([]int, error) { return []int{5001, 5002}, nil }, []int{5001, 5002}, "",
			"holds the slot (pids 5001, 5002 hold it); left running"},
		{"cannot tell", func(record.RunID) ([]int, error) { return nil, unsupported }, nil, unsupported.Error(),
			"holds the slot (which processes hold it, crew cannot tell: darwin has no /proc and no pidfds, so crew cannot prove which processes hold a run's lock); left running"},
		{"none seen", func(record.RunID) ([]int, error) { return nil, nil }, nil, "",
			"holds the slot (crew can see no process holding it: another user's?); left running"},
		{"no way to look", nil, nil, "", "still runs and holds the slot; left running"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &recoverer{holders: c.holders}
			it := r.orphan(vocab.RecoverItem{RunID: "r-1"}, rec)
			if it.Outcome != vocab.Orphaned {
				t.Errorf("outcome %s", it.Outcome)
			}
			if !strings.Contains(it.Reason, c.reason) {
				t.Errorf("reason %q\ndoes not say %q", it.Reason, c.reason)
			}
			if !slices.Equal(it.HolderPIDs, c.pids) {
				t.Errorf("holder pids %v, want %v", it.HolderPIDs, c.pids)
			}
			if it.HoldersUnknown != c.unknown {
				t.Errorf("holders unknown %q, want %q", it.HoldersUnknown, c.unknown)
			}
		})
	}
}
