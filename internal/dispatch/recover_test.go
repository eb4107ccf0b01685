package dispatch_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/runstore"
)

// crashScene is a state root with one of everything recovery deals with.
type crashScene struct {
	alive, orphan, dead *dispatch.Reservation
	leftover            runstore.RunID // finished, but its active file remained
	corruptID           runstore.RunID
	corruptPath         string
	foreignPath         string
	strayID             runstore.RunID // owner lock files with no record
	tempPath            string         // temporary file of an interrupted write
}

func newCrashScene(t *testing.T, d *dispatch.Dispatcher) *crashScene {
	t.Helper()
	setCap(t, d, 10)
	s := &crashScene{}
	s.alive = admit(t, d, "alive")
	s.orphan = admit(t, d, "orphan")
	s.dead = admit(t, d, "dead")
	finished := admit(t, d, "finished")

	require.NoError(t, s.orphan.Supervisor.Release())
	releaseAll(s.dead)

	rec := *finished.Rec
	now := time.Now().UTC()
	code := 0
	rec.State, rec.FinishedAt, rec.ExitCode = runstore.Succeeded, &now, &code
	require.NoError(t, d.Store.WriteDone(&rec))
	releaseAll(finished)
	s.leftover = rec.RunID

	s.corruptID, s.corruptPath = writeCorruptActive(t, d, `{"version": 1, "runId": 42}`)
	s.foreignPath = filepath.Join(d.Store.ActiveDir(), "notes.txt")
	require.NoError(t, os.WriteFile(s.foreignPath, []byte("not a record"), 0o600))

	s.strayID = runstore.NewRunID(time.Now())
	for _, p := range []string{d.Store.OwnerLockPath(s.strayID), d.Store.SupervisorLockPath(s.strayID)} {
		l, err := lockfs.CreateOwner(p)
		require.NoError(t, err)
		require.NoError(t, l.Release())
	}
	s.tempPath = filepath.Join(d.Store.ActiveDir(), "."+string(s.dead.Rec.RunID)+".json123456")
	require.NoError(t, os.WriteFile(s.tempPath, []byte(`{"ver`), 0o600))
	return s
}

// itemsFor indexes a report by run id (or by path, for items without one).
func itemsFor(r *dispatch.RecoverReport) map[string][]dispatch.RecoverItem {
	m := map[string][]dispatch.RecoverItem{}
	for _, it := range r.Items {
		key := it.RunID
		if key == "" {
			key = it.Path
		}
		m[key] = append(m[key], it)
	}
	return m
}

func outcomes(items []dispatch.RecoverItem) []dispatch.Outcome {
	var out []dispatch.Outcome
	for _, it := range items {
		out = append(out, it.Outcome)
	}
	return out
}

func recoverOpts(dry bool) dispatch.RecoverOptions {
	return dispatch.RecoverOptions{DryRun: dry, Timeout: 10 * time.Second}
}

func TestRecoverDryRunChangesNothing(t *testing.T) {
	d := newDispatcher(t)
	s := newCrashScene(t, d)
	before := treeSnapshot(t, d.Store.Root)

	report, err := d.Recover(recoverOpts(true))
	require.NoError(t, err)
	assert.Equal(t, before, treeSnapshot(t, d.Store.Root), "a dry run changes nothing, not even the admission holder note")
	assert.True(t, report.DryRun)
	assert.Equal(t, dispatch.RecoverVersion, report.Version)

	items := itemsFor(report)
	assert.Equal(t, []dispatch.Outcome{dispatch.Alive}, outcomes(items[string(s.alive.Rec.RunID)]))
	assert.Equal(t, []dispatch.Outcome{dispatch.Orphaned}, outcomes(items[string(s.orphan.Rec.RunID)]))
	assert.Equal(t, []dispatch.Outcome{dispatch.Finalized, dispatch.Cleaned}, outcomes(items[string(s.dead.Rec.RunID)]), "the run, then its temporary file")
	assert.Equal(t, []dispatch.Outcome{dispatch.Cleaned}, outcomes(items[string(s.leftover)]))
	assert.Equal(t, []dispatch.Outcome{dispatch.Quarantined}, outcomes(items[string(s.corruptID)]))
	assert.Equal(t, []dispatch.Outcome{dispatch.Quarantined}, outcomes(items[s.foreignPath]))
	assert.Equal(t, []dispatch.Outcome{dispatch.Cleaned, dispatch.Cleaned}, outcomes(items[string(s.strayID)]))
	for _, it := range report.Items {
		if it.Outcome != dispatch.Alive && it.Outcome != dispatch.Orphaned {
			assert.Contains(t, it.Reason, "would", "%+v", it)
		}
	}
}

func TestRecoverFinalizesQuarantinesAndConverges(t *testing.T) {
	d := newDispatcher(t)
	s := newCrashScene(t, d)

	report, err := d.Recover(recoverOpts(false))
	require.NoError(t, err)
	assert.False(t, report.DryRun)
	items := itemsFor(report)

	// Alive: untouched.
	assert.Equal(t, []dispatch.Outcome{dispatch.Alive}, outcomes(items[string(s.alive.Rec.RunID)]))
	assert.FileExists(t, d.Store.ActivePath(s.alive.Rec.RunID))

	// Orphaned: left running and holding its slot, and reported as such.
	orphanItems := items[string(s.orphan.Rec.RunID)]
	require.Len(t, orphanItems, 1)
	assert.Equal(t, dispatch.Orphaned, orphanItems[0].Outcome)
	assert.Equal(t, "orphan", orphanItems[0].Task)
	assert.Contains(t, orphanItems[0].Reason, "supervisor process")
	assert.Contains(t, orphanItems[0].Reason, "is gone")
	assert.FileExists(t, d.Store.ActivePath(s.orphan.Rec.RunID))

	// Dead: finalized as interrupted, with its leftovers.
	deadID := s.dead.Rec.RunID
	assert.Equal(t, []dispatch.Outcome{dispatch.Finalized, dispatch.Cleaned}, outcomes(items[string(deadID)]), "the run, then its temporary file (swept)")
	rec := readDone(t, d, deadID)
	assert.Equal(t, runstore.Interrupted, rec.State)
	assert.Nil(t, rec.ExitCode)
	assert.Contains(t, rec.Reason, "exit status unknown")
	assert.Equal(t, rec.Reason, items[string(deadID)][0].Reason)
	assert.NoFileExists(t, d.Store.ActivePath(deadID))
	assert.NoFileExists(t, d.Store.OwnerLockPath(deadID))
	assert.NoFileExists(t, d.Store.SupervisorLockPath(deadID))
	assert.NoFileExists(t, s.tempPath, "the run's temporary file went with it")

	// Finished leftover: its active file and locks removed, record kept.
	assert.Equal(t, []dispatch.Outcome{dispatch.Cleaned}, outcomes(items[string(s.leftover)]))
	assert.NoFileExists(t, d.Store.ActivePath(s.leftover))
	assert.Equal(t, runstore.Succeeded, readDone(t, d, s.leftover).State)

	// Corrupt record and foreign file: moved to quarantine/ with a note.
	for _, path := range []string{s.corruptPath, s.foreignPath} {
		key := string(s.corruptID)
		if path == s.foreignPath {
			key = path
		}
		assert.Equal(t, []dispatch.Outcome{dispatch.Quarantined}, outcomes(items[key]), path)
		assert.NoFileExists(t, path)
		dest := filepath.Join(d.Store.QuarantineDir(), filepath.Base(path))
		assert.FileExists(t, dest)
		why, err := os.ReadFile(dest + ".why")
		require.NoError(t, err)
		assert.Contains(t, string(why), "original path: "+path)
		assert.Contains(t, string(why), "reason: ")
		assert.Contains(t, items[key][0].Reason, dest)
	}
	assert.NoFileExists(t, d.Store.OwnerLockPath(s.corruptID), "the fence made for the corrupt record is removed")
	content, err := os.ReadFile(filepath.Join(d.Store.QuarantineDir(), filepath.Base(s.foreignPath)))
	require.NoError(t, err)
	assert.Equal(t, "not a record", string(content), "quarantine never alters what it moves")

	// Stray owner lock files: removed.
	assert.Equal(t, []dispatch.Outcome{dispatch.Cleaned, dispatch.Cleaned}, outcomes(items[string(s.strayID)]))
	assert.NoFileExists(t, d.Store.OwnerLockPath(s.strayID))
	assert.NoFileExists(t, d.Store.SupervisorLockPath(s.strayID))

	assert.Zero(t, report.Count(dispatch.FailedItem))
	assert.ElementsMatch(t, []string{
		string(s.alive.Rec.RunID) + ".json", string(s.orphan.Rec.RunID) + ".json",
	}, activeNames(t, d))

	// A second pass finds nothing to do and changes nothing (but the
	// admission holder note, rewritten by every holder of the lock).
	holder, err := filepath.Rel(d.Store.Root, d.Store.AdmissionHolderPath())
	require.NoError(t, err)
	before := treeSnapshot(t, d.Store.Root, holder)
	again, err := d.Recover(recoverOpts(false))
	require.NoError(t, err)
	assert.Equal(t, before, treeSnapshot(t, d.Store.Root, holder))
	assert.Len(t, again.Items, 2)
	assert.Equal(t, 1, again.Count(dispatch.Alive))
	assert.Equal(t, 1, again.Count(dispatch.Orphaned))

	// Once the orphan's command is gone too, it is finalized.
	releaseAll(s.orphan)
	third, err := d.Recover(recoverOpts(false))
	require.NoError(t, err)
	assert.Equal(t, []dispatch.Outcome{dispatch.Finalized}, outcomes(itemsFor(third)[string(s.orphan.Rec.RunID)]))
	assert.Equal(t, runstore.Interrupted, readDone(t, d, s.orphan.Rec.RunID).State)
}

// A corrupt record whose owner lock is held is left in place.
func TestRecoverLeavesCorruptRecordWithLiveOwner(t *testing.T) {
	d := newDispatcher(t)
	id, path := writeCorruptActive(t, d, "")
	holdOwner(t, d.Store.OwnerLockPath(id))
	report, err := d.Recover(recoverOpts(false))
	require.NoError(t, err)
	assert.Equal(t, []dispatch.Outcome{dispatch.Alive}, outcomes(itemsFor(report)[string(id)]))
	assert.FileExists(t, path)
	assert.NoDirExists(t, d.Store.QuarantineDir())
}

// A run whose record is final but whose supervisor still holds the owner
// lock (it is completing the finalization) is left alone.
func TestRecoverLeavesFinishingRunAlone(t *testing.T) {
	d := newDispatcher(t)
	res := admit(t, d, "finishing")
	rec := *res.Rec
	now := time.Now().UTC()
	code := 1
	rec.State, rec.FinishedAt, rec.ExitCode, rec.Reason = runstore.Failed, &now, &code, "command exited with status 1"
	require.NoError(t, d.Store.WriteDone(&rec))

	report, err := d.Recover(recoverOpts(false))
	require.NoError(t, err)
	assert.Equal(t, []dispatch.Outcome{dispatch.Alive}, outcomes(itemsFor(report)[string(rec.RunID)]))
	assert.FileExists(t, d.Store.ActivePath(rec.RunID))
}

func TestRecoverTimeoutReportsFailedItems(t *testing.T) {
	d := newDispatcher(t)
	dead := admit(t, d, "dead")
	releaseAll(dead)
	before := treeSnapshot(t, d.Store.Root)

	report, err := d.Recover(dispatch.RecoverOptions{Timeout: time.Nanosecond})
	require.NoError(t, err)
	require.NotEmpty(t, report.Items)
	for _, it := range report.Items {
		assert.Equal(t, dispatch.FailedItem, it.Outcome, "%+v", it)
		assert.Contains(t, it.Reason, "not reached within")
	}
	items := itemsFor(report)
	assert.Len(t, items[string(dead.Rec.RunID)], 1)
	assert.Len(t, items[d.Store.Root], 1, "the leftover sweep")
	assert.Equal(t, before, treeSnapshot(t, d.Store.Root), "nothing was done")
}

func TestRecoverMissingRootCreatesNothing(t *testing.T) {
	d := newDispatcher(t)
	for _, dry := range []bool{true, false} {
		report, err := d.Recover(recoverOpts(dry))
		require.NoError(t, err)
		assert.NotNil(t, report.Items)
		assert.Empty(t, report.Items)
		assert.NoDirExists(t, d.Store.Root)
	}
}

func TestRecoverSweepsTemporaryFiles(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 2)
	live := admit(t, d, "live")
	// A temporary file of the live run's record is in use: left alone.
	liveTemp := filepath.Join(d.Store.ActiveDir(), "."+string(live.Rec.RunID)+".json42")
	require.NoError(t, os.WriteFile(liveTemp, nil, 0o600))
	// Temporary files of crew.json (written under the admission lock) and of
	// unknown runs: removed.
	cfgTemp := filepath.Join(d.Store.Root, ".crew.json9876")
	require.NoError(t, os.WriteFile(cfgTemp, nil, 0o600))
	gone := filepath.Join(d.Store.ActiveDir(), "."+string(runstore.NewRunID(time.Now()))+".json1")
	require.NoError(t, os.WriteFile(gone, nil, 0o600))

	report, err := d.Recover(recoverOpts(false))
	require.NoError(t, err)
	items := itemsFor(report)
	assert.FileExists(t, liveTemp)
	assert.NoFileExists(t, cfgTemp)
	assert.NoFileExists(t, gone)
	assert.Equal(t, []dispatch.Outcome{dispatch.Cleaned}, outcomes(items[cfgTemp]))
	assert.FileExists(t, d.Store.AdmissionLockPath(), "the admission lock file is never removed")
	for _, it := range report.Items {
		assert.False(t, strings.HasPrefix(filepath.Base(it.Path), ".locks"), "%+v", it)
	}
}

func TestReportCount(t *testing.T) {
	r := &dispatch.RecoverReport{Items: []dispatch.RecoverItem{
		{Outcome: dispatch.Alive}, {Outcome: dispatch.Cleaned}, {Outcome: dispatch.Cleaned},
	}}
	assert.Equal(t, 1, r.Count(dispatch.Alive))
	assert.Equal(t, 2, r.Count(dispatch.Cleaned))
	assert.Equal(t, 0, r.Count(dispatch.FailedItem))
}
