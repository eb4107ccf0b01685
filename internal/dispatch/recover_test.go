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
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// crashScene is a state root with one of everything recovery deals with.
type crashScene struct {
	orphanCmd           *lockfs.Lock // the orphan's "command", holding its owner lock
	alive, orphan, dead *dispatch.Reservation
	leftover            record.RunID // finished, but its active file remained
	corruptID           record.RunID
	corruptPath         string
	foreignPath         string
	strayID             record.RunID // owner lock files with no record
	tempPath            string       // temporary file of an interrupted write
}

func newCrashScene(t *testing.T, d *dispatch.Dispatcher) *crashScene {
	t.Helper()
	setCap(t, d, 10)
	s := &crashScene{}
	s.alive = admit(t, d, "alive")
	s.orphan = admit(t, d, "orphan")
	s.dead = admit(t, d, "dead")
	finished := admit(t, d, "finished")

	s.orphanCmd = orphanize(t, d, s.orphan)
	releaseAll(s.dead)

	rec := *finished.Rec
	now := time.Now().UTC()
	code := 0
	rec.State, rec.FinishedAt, rec.ExitCode = record.Succeeded, &now, &code
	writeRecordFile(t, lay(d).done(rec.RunID), &rec)
	releaseAll(finished)
	s.leftover = rec.RunID

	s.corruptID, s.corruptPath = writeCorruptActive(t, d, `{"version": 1, "runId": 42}`)
	s.foreignPath = filepath.Join(lay(d).activeDir(), "notes.txt")
	require.NoError(t, os.WriteFile(s.foreignPath, []byte("not a record"), 0o600))

	s.strayID = record.NewRunID(time.Now())
	for _, p := range []string{lay(d).ownerLock(s.strayID), lay(d).supervisorLock(s.strayID)} {
		require.NoError(t, lockAt(t, p).Release())
	}
	s.tempPath = filepath.Join(lay(d).activeDir(), "."+string(s.dead.Rec.RunID)+".json123456")
	require.NoError(t, os.WriteFile(s.tempPath, []byte(`{"ver`), 0o600))
	return s
}

// itemsFor indexes a report by run id (or by path, for items without one).
func itemsFor(r *vocab.RecoverReport) map[string][]vocab.RecoverItem {
	m := map[string][]vocab.RecoverItem{}
	for _, it := range r.Items {
		key := it.RunID
		if key == "" {
			key = it.Path
		}
		m[key] = append(m[key], it)
	}
	return m
}

func outcomes(items []vocab.RecoverItem) []vocab.RecoverOutcome {
	var out []vocab.RecoverOutcome
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
	before := treeSnapshot(t, d.Logs.Root())

	report, err := d.Admin().Recover(recoverOpts(true))
	require.NoError(t, err)
	assert.Equal(t, before, treeSnapshot(t, d.Logs.Root()), "a dry run changes nothing, not even the admission holder note")
	assert.True(t, report.DryRun)
	assert.Equal(t, vocab.RecoverVersion, report.Version)

	items := itemsFor(report)
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Alive}, outcomes(items[string(s.alive.Rec.RunID)]))
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Orphaned}, outcomes(items[string(s.orphan.Rec.RunID)]))
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Finalized, vocab.Cleaned}, outcomes(items[string(s.dead.Rec.RunID)]), "the run, then its temporary file")
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Cleaned}, outcomes(items[string(s.leftover)]))
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Quarantined}, outcomes(items[string(s.corruptID)]))
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Quarantined}, outcomes(items[s.foreignPath]))
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Cleaned, vocab.Cleaned}, outcomes(items[string(s.strayID)]))
	for _, it := range report.Items {
		if it.Outcome != vocab.Alive && it.Outcome != vocab.Orphaned {
			assert.Contains(t, it.Reason, "would", "%+v", it)
		}
	}
}

func TestRecoverFinalizesQuarantinesAndConverges(t *testing.T) {
	d := newDispatcher(t)
	s := newCrashScene(t, d)

	report, err := d.Admin().Recover(recoverOpts(false))
	require.NoError(t, err)
	assert.False(t, report.DryRun)
	items := itemsFor(report)

	// Alive: untouched.
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Alive}, outcomes(items[string(s.alive.Rec.RunID)]))
	assert.FileExists(t, lay(d).active(s.alive.Rec.RunID))

	// Orphaned: left running and holding its slot, and reported as such.
	orphanItems := items[string(s.orphan.Rec.RunID)]
	require.Len(t, orphanItems, 1)
	assert.Equal(t, vocab.Orphaned, orphanItems[0].Outcome)
	assert.Equal(t, "orphan", orphanItems[0].Task)
	assert.Contains(t, orphanItems[0].Reason, "supervisor process")
	assert.Contains(t, orphanItems[0].Reason, "is gone")
	assert.FileExists(t, lay(d).active(s.orphan.Rec.RunID))

	// Dead: finalized as interrupted, with its leftovers.
	deadID := s.dead.Rec.RunID
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Finalized, vocab.Cleaned}, outcomes(items[string(deadID)]), "the run, then its temporary file (swept)")
	rec := readDone(t, d, deadID)
	assert.Equal(t, record.Interrupted, rec.State)
	assert.Nil(t, rec.ExitCode)
	assert.Contains(t, rec.Reason, "exit status unknown")
	assert.Equal(t, rec.Reason, items[string(deadID)][0].Reason)
	assert.NoFileExists(t, lay(d).active(deadID))
	assert.NoFileExists(t, lay(d).ownerLock(deadID))
	assert.NoFileExists(t, lay(d).supervisorLock(deadID))
	assert.NoFileExists(t, s.tempPath, "the run's temporary file went with it")

	// Finished leftover: its active file and locks removed, record kept.
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Cleaned}, outcomes(items[string(s.leftover)]))
	assert.NoFileExists(t, lay(d).active(s.leftover))
	assert.Equal(t, record.Succeeded, readDone(t, d, s.leftover).State)

	// Corrupt record and foreign file: moved to quarantine/ with a note.
	for _, path := range []string{s.corruptPath, s.foreignPath} {
		key := string(s.corruptID)
		if path == s.foreignPath {
			key = path
		}
		assert.Equal(t, []vocab.RecoverOutcome{vocab.Quarantined}, outcomes(items[key]), path)
		assert.NoFileExists(t, path)
		dest := filepath.Join(lay(d).quarantineDir(), filepath.Base(path))
		assert.FileExists(t, dest)
		why, err := os.ReadFile(dest + ".why")
		require.NoError(t, err)
		assert.Contains(t, string(why), "original path: "+path)
		assert.Contains(t, string(why), "reason: ")
		assert.Contains(t, items[key][0].Reason, dest)
	}
	assert.NoFileExists(t, lay(d).ownerLock(s.corruptID), "the fence made for the corrupt record is removed")
	content, err := os.ReadFile(filepath.Join(lay(d).quarantineDir(), filepath.Base(s.foreignPath)))
	require.NoError(t, err)
	assert.Equal(t, "not a record", string(content), "quarantine never alters what it moves")

	// Stray owner lock files: removed.
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Cleaned, vocab.Cleaned}, outcomes(items[string(s.strayID)]))
	assert.NoFileExists(t, lay(d).ownerLock(s.strayID))
	assert.NoFileExists(t, lay(d).supervisorLock(s.strayID))

	assert.Zero(t, report.Count(vocab.FailedItem))
	assert.ElementsMatch(t, []string{
		string(s.alive.Rec.RunID) + ".run", string(s.orphan.Rec.RunID) + ".run",
	}, activeNames(t, d))

	// A second pass finds nothing to do and changes nothing (but the
	// admission holder note, rewritten by every holder of the lock).
	holder, err := filepath.Rel(d.Logs.Root(), lay(d).holder())
	require.NoError(t, err)
	before := treeSnapshot(t, d.Logs.Root(), holder)
	again, err := d.Admin().Recover(recoverOpts(false))
	require.NoError(t, err)
	assert.Equal(t, before, treeSnapshot(t, d.Logs.Root(), holder))
	assert.Len(t, again.Items, 2)
	assert.Equal(t, 1, again.Count(vocab.Alive))
	assert.Equal(t, 1, again.Count(vocab.Orphaned))

	// Once the orphan's command is gone too, it is finalized.
	require.NoError(t, s.orphanCmd.Release())
	third, err := d.Admin().Recover(recoverOpts(false))
	require.NoError(t, err)
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Finalized}, outcomes(itemsFor(third)[string(s.orphan.Rec.RunID)]))
	assert.Equal(t, record.Interrupted, readDone(t, d, s.orphan.Rec.RunID).State)
}

// A corrupt record whose owner lock is held is left in place.
func TestRecoverLeavesCorruptRecordWithLiveOwner(t *testing.T) {
	d := newDispatcher(t)
	id, path := writeCorruptActive(t, d, "")
	holdOwner(t, lay(d).ownerLock(id))
	report, err := d.Admin().Recover(recoverOpts(false))
	require.NoError(t, err)
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Alive}, outcomes(itemsFor(report)[string(id)]))
	assert.FileExists(t, path)
	assert.NoDirExists(t, lay(d).quarantineDir())
}

// A run whose record is final but whose supervisor still holds the owner
// lock (it is completing the finalization) is left alone.
func TestRecoverLeavesFinishingRunAlone(t *testing.T) {
	d := newDispatcher(t)
	res := admit(t, d, "finishing")
	rec := *res.Rec
	now := time.Now().UTC()
	code := 1
	rec.State, rec.FinishedAt, rec.ExitCode, rec.Reason = record.Failed, &now, &code, "command exited with status 1"
	writeRecordFile(t, lay(d).done(rec.RunID), &rec)

	report, err := d.Admin().Recover(recoverOpts(false))
	require.NoError(t, err)
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Alive}, outcomes(itemsFor(report)[string(rec.RunID)]))
	assert.FileExists(t, lay(d).active(rec.RunID))
}

func TestRecoverTimeoutReportsFailedItems(t *testing.T) {
	d := newDispatcher(t)
	dead := admit(t, d, "dead")
	releaseAll(dead)
	before := treeSnapshot(t, d.Logs.Root())

	report, err := d.Admin().Recover(dispatch.RecoverOptions{Timeout: time.Nanosecond})
	require.NoError(t, err)
	require.NotEmpty(t, report.Items)
	for _, it := range report.Items {
		assert.Equal(t, vocab.FailedItem, it.Outcome, "%+v", it)
		assert.Contains(t, it.Reason, "not reached within")
	}
	items := itemsFor(report)
	assert.Len(t, items[string(dead.Rec.RunID)], 1)
	assert.Len(t, items[d.Logs.Root()], 1, "the leftover sweep")
	assert.Equal(t, before, treeSnapshot(t, d.Logs.Root()), "nothing was done")
}

func TestRecoverMissingRootCreatesNothing(t *testing.T) {
	d := newDispatcher(t)
	for _, dry := range []bool{true, false} {
		report, err := d.Admin().Recover(recoverOpts(dry))
		require.NoError(t, err)
		assert.NotNil(t, report.Items)
		assert.Empty(t, report.Items)
		assert.NoDirExists(t, d.Logs.Root())
	}
}

func TestRecoverSweepsTemporaryFiles(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 2)
	live := admit(t, d, "live")
	// A temporary file of the live run's record is in use: left alone.
	liveTemp := filepath.Join(lay(d).activeDir(), "."+string(live.Rec.RunID)+".json42")
	require.NoError(t, os.WriteFile(liveTemp, nil, 0o600))
	// Temporary files of crew.json (written under the admission lock) and of
	// unknown runs: removed.
	cfgTemp := filepath.Join(d.Logs.Root(), ".crew.json9876")
	require.NoError(t, os.WriteFile(cfgTemp, nil, 0o600))
	gone := filepath.Join(lay(d).activeDir(), "."+string(record.NewRunID(time.Now()))+".json1")
	require.NoError(t, os.WriteFile(gone, nil, 0o600))

	report, err := d.Admin().Recover(recoverOpts(false))
	require.NoError(t, err)
	items := itemsFor(report)
	assert.FileExists(t, liveTemp)
	assert.NoFileExists(t, cfgTemp)
	assert.NoFileExists(t, gone)
	assert.Equal(t, []vocab.RecoverOutcome{vocab.Cleaned}, outcomes(items[cfgTemp]))
	assert.FileExists(t, lay(d).holder(), "the admission holder note is never removed")
	for _, it := range report.Items {
		assert.False(t, strings.HasPrefix(filepath.Base(it.Path), ".locks"), "%+v", it)
	}
}

func TestReportCount(t *testing.T) {
	r := &vocab.RecoverReport{Items: []vocab.RecoverItem{
		{Outcome: vocab.Alive}, {Outcome: vocab.Cleaned}, {Outcome: vocab.Cleaned},
	}}
	assert.Equal(t, 1, r.Count(vocab.Alive))
	assert.Equal(t, 2, r.Count(vocab.Cleaned))
	assert.Equal(t, 0, r.Count(vocab.FailedItem))
}

// A root whose owners/ directory is gone (copied without its empty
// directories, or removed by hand) still has its unreadable records
// quarantined and reported: the fence that guards the move needs the
// directory, and recover makes it, instead of skipping them silently.
func TestRecoverQuarantinesWithoutAnOwnersDirectory(t *testing.T) {
	root := filepath.Join(t.TempDir(), "state")
	st := runstore.New(root)
	require.NoError(t, st.Ensure())
	bad := "r-20260301T080000.000000000Z-0000000000000001.json"
	if err := os.WriteFile(filepath.Join(root, "runs", "active", bad), []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "owners")); err != nil {
		t.Fatal(err)
	}
	st.Close()
	rep, err := dispatch.New(root).Admin().Recover(dispatch.RecoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Count(vocab.Quarantined); n != 1 {
		t.Fatalf("quarantined %d, want the torn record: %+v", n, rep.Items)
	}
	if _, err := os.Lstat(filepath.Join(root, "quarantine", bad)); err != nil {
		t.Errorf("the torn record is not in quarantine/: %v", err)
	}
}
