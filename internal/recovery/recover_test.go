package recovery

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
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
			r := &recoverer{opts: Options{Holders: c.holders}}
			it := r.orphan(Item{RunID: "r-1"}, rec)
			if it.Outcome != Orphaned {
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

// A root whose owners/ directory is gone (copied without its empty
// directories, or removed by hand) still has its unreadable records
// quarantined and reported: the fence that guards the move needs the
// directory, and recover makes it, instead of skipping them silently.
func TestRecoverQuarantinesWithoutAnOwnersDirectory(t *testing.T) {
	st := newStore(t)
	root := st.Root()
	bad := "r-20260301T080000.000000000Z-0000000000000001.json"
	if err := os.WriteFile(filepath.Join(root, "runs", "active", bad), []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "owners")); err != nil {
		t.Fatal(err)
	}
	st.Close()
	rep, err := Recover(runstore.New(root), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Count(Quarantined); n != 1 {
		t.Fatalf("quarantined %d, want the torn record: %+v", n, rep.Items)
	}
	if _, err := os.Lstat(filepath.Join(root, "quarantine", bad)); err != nil {
		t.Errorf("the torn record is not in quarantine/: %v", err)
	}
}
