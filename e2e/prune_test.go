package e2e

// Issue 10, item 13: a prune killed between a run's log and its record
// leaves nothing that is never cleaned.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// prune removes a finished run's log first, then its record. Killed in
// between, it leaves a record without a log, which is still a finished run
// (status lists it, without a log) and which the next prune removes. A
// recover in between changes nothing and fails nothing.
func TestPruneKilledBetweenLogAndRecordConverges(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 0, e.run("start", "old", "--", "echo", "hello").Code)
	run := e.finishedRun("old")
	require.FileExists(t, run.LogPath)
	record := filepath.Join(e.root, "runs", "done", shardOf(t, run.RunID), run.RunID+".run")
	require.FileExists(t, record)

	killed := e.runEnv([]string{"CREW_FAILPOINT=prune-log-removed:kill"}, "prune", "--keep", "0")
	require.Equal(t, 137, killed.Code, "prune was killed at the failpoint: %s", killed.Stderr)
	assert.NoFileExists(t, run.LogPath, "the log goes first")
	assert.FileExists(t, record, "the record is left for the next prune")
	left := e.finishedRun("old")
	assert.Empty(t, left.LogPath, "status shows the run without a log")

	rep, r := e.recover()
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Zero(t, rep.changes(), "nothing for recover to do: %+v", rep.Items)

	r = e.run("prune", "--keep", "0")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stdout, "removed 1 finished run(s)")
	assert.NoFileExists(t, record)
	assert.Empty(t, e.status().Finished)
	assert.NoDirExists(t, filepath.Dir(record), "the emptied shard goes too")
	logs, err := os.ReadDir(filepath.Join(e.root, "logs"))
	require.NoError(t, err)
	assert.Empty(t, logs)
	rep, _ = e.recover()
	assert.Zero(t, rep.changes(), "converged: %+v", rep.Items)
}

// The other half: a log whose record is gone (a record removed first, by
// hand or by an older crew) is swept by recover.
func TestRecoverSweepsALogWithoutRecord(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 0, e.run("start", "old", "--", "echo", "hello").Code)
	run := e.finishedRun("old")
	require.NoError(t, os.Remove(filepath.Join(e.root, "runs", "done", shardOf(t, run.RunID), run.RunID+".run")))
	rep, r := e.recover()
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Len(t, rep.Items, 1)
	assert.Equal(t, "cleaned", rep.Items[0].Outcome)
	assert.Equal(t, run.LogPath, rep.Items[0].Path)
	assert.NoFileExists(t, run.LogPath)
	rep, _ = e.recover()
	assert.Zero(t, rep.changes())
}

// shardOf is the finished-run shard of a run id: its creation hour.
func shardOf(t *testing.T, id string) string {
	t.Helper()
	// r-20261129T100211.123456789Z-...: the shard is 2026-11-29T10.
	require.GreaterOrEqual(t, len(id), 13)
	d := id[2:]
	return d[0:4] + "-" + d[4:6] + "-" + d[6:8] + "T" + d[9:11]
}
