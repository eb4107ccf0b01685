package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type recoverJSON struct {
	Version int  `json:"version"`
	DryRun  bool `json:"dryRun"`
	Items   []struct {
		RunID   string `json:"runId"`
		Task    string `json:"task"`
		Path    string `json:"path"`
		Outcome string `json:"outcome"`
		Reason  string `json:"reason"`
		// HolderPIDs, for an orphan, are the processes shown holding
		// its slot; HoldersUnknown says why they could not be.
		HolderPIDs     []int  `json:"holderPids"`
		HoldersUnknown string `json:"holderPidsUnknown"`
	} `json:"items"`
}

func (e *env) recover(args ...string) (recoverJSON, result) {
	e.t.Helper()
	r := e.run(append([]string{"recover", "--json"}, args...)...)
	var rep recoverJSON
	require.NoError(e.t, json.Unmarshal([]byte(r.Stdout), &rep), "stdout %q stderr %q", r.Stdout, r.Stderr)
	return rep, r
}

// changes counts the items of a report that changed (or would change)
// something.
func (r recoverJSON) changes() int {
	n := 0
	for _, it := range r.Items {
		switch it.Outcome {
		case "finalized", "quarantined", "cleaned", "failed":
			n++
		}
	}
	return n
}

func (r recoverJSON) outcomesFor(id string) []string {
	var out []string
	for _, it := range r.Items {
		if it.RunID == id {
			out = append(out, it.Outcome)
		}
	}
	return out
}

// runIDsOnDisk lists every run id that has a record, active or finished,
// and checks that every record file is whole (a slot file with a valid
// slot) and holds a record of version 1.
func runIDsOnDisk(t *testing.T, root string) (active, done []string) {
	t.Helper()
	walk := func(dir string, into *[]string) {
		_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return nil
			}
			name := info.Name()
			assert.False(t, strings.HasPrefix(name, "."), "leftover temporary file %s", path)
			raw, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			data, derr := recordJSON(raw)
			require.NoError(t, derr, "torn record %s", path)
			var rec struct {
				Version int    `json:"version"`
				RunID   string `json:"runId"`
			}
			require.NoError(t, json.Unmarshal(data, &rec), "torn record %s: %q", path, data)
			assert.Equal(t, 1, rec.Version)
			assert.Equal(t, rec.RunID+".run", name)
			*into = append(*into, rec.RunID)
			return nil
		})
	}
	walk(filepath.Join(root, "runs", "active"), &active)
	walk(filepath.Join(root, "runs", "done"), &done)
	return active, done
}

func ownerFiles(t *testing.T, root string) []string {
	entries, err := os.ReadDir(filepath.Join(root, "owners"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if e.IsDir() && e.Name() == ".released" {
			continue // the passage finished runs' lock files leave owners/ by: layout, not leftovers
		}
		names = append(names, e.Name())
	}
	return names
}

// crashStep describes what a kill at one failpoint leaves, and what the
// truth about the killed run is.
type crashStep struct {
	name       string
	hasRecord  bool   // a record of the run exists after the kill
	cmdExits   bool   // the command exits by itself (the gate is open)
	orphan     bool   // the command outlives the kill
	wantState  string // the run's final state
	wantReason []string
	// recoverOutcome is what the first recover reports for the run when it
	// runs before any admission.
	recoverOutcome string
}

var crashSteps = []crashStep{
	{name: "admission-locked"},
	{name: "owner-locked", recoverOutcome: "cleaned"},
	{name: "reserved", hasRecord: true, wantState: "interrupted", recoverOutcome: "finalized",
		wantReason: []string{"state was provisioning", "the command was never started", "exit status unknown"}},
	{name: "admitted", hasRecord: true, wantState: "interrupted", recoverOutcome: "finalized",
		wantReason: []string{"state was provisioning", "the command was never started", "exit status unknown"}},
	{name: "launched", hasRecord: true, orphan: true, wantState: "interrupted", recoverOutcome: "finalized",
		wantReason: []string{"state was provisioning", "the command may have started", "exit status unknown"}},
	{name: "exited", hasRecord: true, cmdExits: true, wantState: "interrupted", recoverOutcome: "finalized",
		wantReason: []string{"state was running", "is gone too", "exit status unknown"}},
	{name: "final-synced", hasRecord: true, cmdExits: true, wantState: "succeeded", recoverOutcome: "cleaned"},
	{name: "indexed", hasRecord: true, cmdExits: true, wantState: "succeeded", recoverOutcome: "cleaned"},
	{name: "finalized", hasRecord: true, cmdExits: true, wantState: "succeeded", recoverOutcome: "cleaned"},
}

// TestCrashMatrix kills crew start with SIGKILL at every step of
// admission, launch and finalization, then checks that the next start is
// admitted without any timeout (and never while the killed run's command
// still runs), that recovery tells the accurate story, that no record is
// lost, duplicated or torn, and that a second recovery does nothing. Each
// step runs twice: recovery first, and admission first.
func TestCrashMatrix(t *testing.T) {
	for _, step := range crashSteps {
		for _, order := range []string{"recover-first", "admit-first"} {
			t.Run(step.name+"/"+order, func(t *testing.T) {
				t.Parallel()
				crashAndCheck(t, step, order == "recover-first")
			})
		}
	}
}

func crashAndCheck(t *testing.T, step crashStep, recoverFirst bool) {
	e := newEnv(t)
	e.initMax(1)
	gate, openGate := e.gate("command-gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) }) // let an orphaned command end
	if step.cmdExits {
		openGate()
	}
	victim := e.start([]string{"CREW_FAILPOINT=" + step.name + ":kill"}, append([]string{"start", "victim", "--"}, waitCmd(gate)...)...)
	r := victim.wait(t, 20*time.Second)
	require.Equal(t, 137, r.Code, "crew killed itself at %s: %s", step.name, r.Stderr)
	supervisorPID := victim.cmd.Process.Pid

	active, done := runIDsOnDisk(t, e.root)
	var id string
	switch {
	case step.name == "final-synced" || step.name == "indexed":
		// The final record is durable in the run's own file, which was
		// not yet moved (at "indexed" it has its entry in the index of
		// finished runs already): a finished leftover in the active set.
		// It holds no slot, and status shows the run finished.
		require.Empty(t, done)
		require.Len(t, active, 1)
		id = active[0]
		s := e.status()
		assert.Zero(t, s.SlotsInUse, "a final record in runs/active holds no slot")
		assert.Empty(t, s.Active, "a final record in runs/active is not shown as active")
		assert.Equal(t, "succeeded", e.runRecord(id).State)
		var listed []string
		for _, r := range s.Finished {
			listed = append(listed, r.RunID)
		}
		assert.Contains(t, listed, id, "status lists it among the finished runs")
		require.NotEmpty(t, e.history().Runs)
		assert.Equal(t, id, e.history().Runs[0].RunID, "and so does history")
	case step.name == "finalized":
		// The final record is durable and moved into runs/done; the
		// run's lock files are leftovers of the finalization.
		require.Len(t, done, 1)
		require.Empty(t, active)
		id = done[0]
	case step.hasRecord:
		require.Len(t, append(active, done...), 1, "one record of the killed run")
		id = active[0]
	default:
		require.Empty(t, append(active, done...), "no record before the reservation is durable")
		if files := ownerFiles(t, e.root); len(files) > 0 {
			id = strings.TrimSuffix(files[0], ".lock")
			id = strings.TrimSuffix(id, ".supervisor")
		}
		if step.recoverOutcome != "" {
			// Else outcomesFor("") below would look at items of no run.
			require.NotEmpty(t, id, "a kill at %s leaves the run's owner lock files", step.name)
		}
	}

	if step.orphan {
		// The command inherited the owner lock: its slot stays held.
		r := e.run("start", "other", "--", "true")
		require.Equal(t, 75, r.Code, "admitted while the killed run's command still runs: %s", r.Stderr)
		rep, _ := e.recover()
		assert.Equal(t, []string{"orphaned"}, rep.outcomesFor(id))
		assert.Equal(t, 0, rep.changes(), "an orphan is left running")
		openGate()
		eventually(t, 10*time.Second, "the orphaned command to exit and free its slot", func() bool { return e.status().SlotsInUse == 0 })
	}

	if recoverFirst {
		dry, _ := e.recover("--dry-run")
		assert.True(t, dry.DryRun)
		rep, rr := e.recover()
		require.Equal(t, 0, rr.Code, rr.Stderr)
		if step.recoverOutcome != "" {
			assert.Contains(t, rep.outcomesFor(id), step.recoverOutcome, "report %+v", rep)
			assert.Contains(t, dry.outcomesFor(id), step.recoverOutcome, "dry run reports the same: %+v", dry)
		} else {
			assert.Zero(t, rep.changes(), "report %+v", rep)
		}
		start := time.Now()
		r := e.run("start", "--lock-timeout", "30s", "other", "--", "true")
		require.Equal(t, 0, r.Code, r.Stderr)
		assert.Less(t, time.Since(start), 10*time.Second)
	} else {
		start := time.Now()
		r := e.run("start", "--lock-timeout", "30s", "other", "--", "true")
		require.Equal(t, 0, r.Code, "the next start is admitted at once: %s", r.Stderr)
		assert.Less(t, time.Since(start), 10*time.Second)
		rep, rr := e.recover()
		require.Equal(t, 0, rr.Code, rr.Stderr)
		for _, it := range rep.Items {
			assert.NotEqual(t, "failed", it.Outcome, "%+v", it)
		}
	}

	// (d) A second recovery does nothing.
	again, _ := e.recover()
	assert.Zero(t, again.changes(), "second recover: %+v", again)

	// (c) Nothing lost, duplicated, torn or left behind.
	active, done = runIDsOnDisk(t, e.root)
	assert.Empty(t, active, "no active records remain")
	assert.Empty(t, ownerFiles(t, e.root), "no lock files remain")
	if !step.hasRecord {
		assert.Len(t, done, 1, "only the other run's record")
		return
	}
	require.Len(t, done, 2, "the killed run and the other run, once each")
	rec := e.runRecord(id)
	assert.Equal(t, step.wantState, rec.State)
	if step.wantState == "interrupted" {
		assert.Nil(t, rec.ExitCode, "exit status unknown")
		assert.Contains(t, rec.Reason, fmt.Sprintf("owner process %d on host", supervisorPID))
		assert.Contains(t, rec.Reason, "exited without finalizing the run (killed or crashed)")
		for _, want := range step.wantReason {
			assert.Contains(t, rec.Reason, want)
		}
	} else {
		require.NotNil(t, rec.ExitCode)
		assert.Equal(t, 0, *rec.ExitCode)
	}
}

// TestConcurrentRecoversFinalizeOnce forces two recoveries to overlap on
// one dead run: the first holds the run's fence, the second runs in full
// meanwhile. The run is finalized exactly once.
func TestConcurrentRecoversFinalizeOnce(t *testing.T) {
	secondFinalized := overlappingRecovers(t, nil)
	assert.False(t, secondFinalized, "the second recover must not finalize a run another one holds")
}

// TestConcurrentRecoversCatchesMissingFence proves the test above can
// fail: with the fence compiled out (failpoint fence:skip), the second
// recover finalizes the run the first one is working on.
func TestConcurrentRecoversCatchesMissingFence(t *testing.T) {
	secondFinalized := overlappingRecovers(t, []string{"fence:skip"})
	assert.True(t, secondFinalized, "without the fence the forced overlap finalizes the run from both sides")
}

func overlappingRecovers(t *testing.T, sabotage []string) (secondFinalized bool) {
	e := newEnv(t)
	victim := e.start([]string{"CREW_FAILPOINT=exited:kill"}, "start", "victim", "--", "true")
	require.Equal(t, 137, victim.wait(t, 10*time.Second).Code)
	active, _ := runIDsOnDisk(t, e.root)
	require.Len(t, active, 1)
	id := active[0]
	fp := func(rules ...string) []string {
		return []string{"CREW_FAILPOINT=" + strings.Join(append(rules, sabotage...), ",")}
	}

	gate, openGate := e.gate("first-recover")
	first := e.start(fp("recover-locked:wait:"+gate), "recover", "--json")
	eventually(t, 10*time.Second, "the first recover to hold the run's fence", func() bool { return exists(gate + ".reached") })

	r := e.runEnv(fp(), "recover", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var second recoverJSON
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &second))
	secondFinalized = slices.Contains(second.outcomesFor(id), "finalized")
	openGate()
	fr := first.wait(t, 10*time.Second)
	require.Equal(t, 0, fr.Code, fr.Stderr)
	if len(sabotage) > 0 {
		return secondFinalized
	}
	var firstRep recoverJSON
	require.NoError(t, json.Unmarshal([]byte(fr.Stdout), &firstRep))
	assert.Equal(t, []string{"finalized"}, firstRep.outcomesFor(id))
	_, done := runIDsOnDisk(t, e.root)
	assert.Equal(t, []string{id}, done, "finalized exactly once")
	third, _ := e.recover()
	assert.Zero(t, third.changes())
	return secondFinalized
}

// TestRecoverQuarantinesUnreadableRecords: every kind of unreadable
// record with a free owner lock is moved aside with a note, never deleted.
func TestRecoverQuarantinesUnreadableRecords(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	activeDir := filepath.Join(e.root, "runs", "active")
	bad := map[string]string{
		"r-20260101T000000.000000000Z-00000000000000a1.json": "",
		"r-20260101T000000.000000000Z-00000000000000a2.json": `{"version": 1, "runId": "r-2026`,
		"r-20260101T000000.000000000Z-00000000000000a3.json": "not json at all",
		"r-20260101T000000.000000000Z-00000000000000a4.json": `{"version": 9, "runId": "r-20260101T000000.000000000Z-00000000000000a4"}`,
		"notes.txt": "someone's file",
	}
	for name, content := range bad {
		require.NoError(t, os.WriteFile(filepath.Join(activeDir, name), []byte(content), 0o600))
	}
	// A leftover temporary file, a lock file without a record, and a stop
	// request of a run that is not active (crew stop asked as it ended).
	require.NoError(t, os.WriteFile(filepath.Join(activeDir, ".r-20260101T000000.000000000Z-00000000000000b1.json12345"), []byte("{"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(e.root, "owners", "r-20260101T000000.000000000Z-00000000000000b2.lock"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(e.root, "owners", "r-20260101T000000.000000000Z-00000000000000b3.stop"), []byte("{}"), 0o600))

	rep, r := e.recover()
	require.Equal(t, 0, r.Code, r.Stderr)
	counts := map[string]int{}
	for _, it := range rep.Items {
		counts[it.Outcome]++
	}
	assert.Equal(t, 5, counts["quarantined"], "%+v", rep)
	assert.Equal(t, 3, counts["cleaned"], "%+v", rep)
	for name, content := range bad {
		q := filepath.Join(e.root, "quarantine", name)
		data, err := os.ReadFile(q)
		require.NoError(t, err, "quarantined, not deleted: %s", name)
		assert.Equal(t, content, string(data))
		note, err := os.ReadFile(q + ".why")
		require.NoError(t, err)
		assert.Contains(t, string(note), "original path: "+filepath.Join(activeDir, name))
	}
	entries, err := os.ReadDir(activeDir)
	require.NoError(t, err)
	assert.Empty(t, entries)
	again, _ := e.recover()
	assert.Zero(t, again.changes())
	assert.Empty(t, e.status().Problems)
}

// TestInternalErrorIsRecorded: a panic after admission records the run as
// failed with "crew internal error", kills the command, frees the slot and
// exits 125.
func TestInternalErrorIsRecorded(t *testing.T) {
	e := newEnv(t)
	gate, _ := e.gate("never")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })
	r := e.runEnv([]string{"CREW_FAILPOINT=launched:panic"}, append([]string{"start", "boom", "--"}, waitCmd(gate)...)...)
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: boom: crew internal error in run r-")
	assert.Contains(t, r.Stderr, "panic: failpoint launched")
	s := e.status("boom")
	require.Len(t, s.Finished, 1)
	assert.Equal(t, "failed", s.Finished[0].State)
	assert.Contains(t, s.Finished[0].Reason, "crew internal error: panic: failpoint launched")
	assert.Equal(t, 0, s.SlotsInUse)
	assert.Empty(t, s.Active)
}

// A power loss in the middle of the pwrite of the running record (which
// is not synced: nothing acts on it before the final record, which is)
// leaves that slot torn. The durable provisioning record in the other slot
// is the record then, and recovery tells the truth it can: the command
// may have started.
func TestTornRunningSlotLeavesTheProvisioningRecord(t *testing.T) {
	e := newEnv(t)
	victim := e.start([]string{"CREW_FAILPOINT=exited:kill"}, "start", "victim", "--", "true")
	require.Equal(t, 137, victim.wait(t, 10*time.Second).Code)
	active, _ := runIDsOnDisk(t, e.root)
	require.Len(t, active, 1)
	id := active[0]
	path := activeRecordPath(e.root, id)
	assert.Equal(t, "running", e.runRecord(id).State)

	// Tear the newest slot: zero it from the middle of its record on.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	size := len(data) / 2
	newest := 0
	if _, s1, ok := slotOf(data[size:]); ok {
		if _, s0, ok0 := slotOf(data[:size]); !ok0 || s1 > s0 {
			newest = 1
		}
	}
	for i := newest*size + 300; i < (newest+1)*size; i++ {
		data[i] = 0
	}
	require.NoError(t, os.WriteFile(path, data, 0o600))

	assert.Equal(t, "provisioning", e.runRecord(id).State, "the torn slot is invalid; the durable one is the record")
	rep, r := e.recover()
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, []string{"finalized"}, rep.outcomesFor(id))
	rec := e.runRecord(id)
	assert.Equal(t, "interrupted", rec.State)
	assert.Contains(t, rec.Reason, "state was provisioning")
	assert.Contains(t, rec.Reason, "the command may have started")
}
