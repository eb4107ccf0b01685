package dispatch_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

func TestStatusOnMissingRootCreatesNothing(t *testing.T) {
	d := newDispatcher(t)
	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	assert.Equal(t, vocab.StatusVersion, snap.Version)
	assert.Equal(t, 1, snap.Version)
	assert.Equal(t, d.Logs.Root(), snap.Root)
	assert.Equal(t, lay(d).config(), snap.ConfigPath)
	assert.False(t, snap.ConfigExists)
	assert.Equal(t, record.DefaultMaximumInProgress, snap.MaximumInProgress)
	assert.Equal(t, 0, snap.SlotsInUse)
	assert.NotNil(t, snap.Active, "empty lists, not null, in JSON")
	assert.Empty(t, snap.Active)
	assert.NotNil(t, snap.Finished)
	assert.Empty(t, snap.Finished)
	assert.NotNil(t, snap.Problems)
	assert.Empty(t, snap.Problems)
	assert.NoDirExists(t, d.Logs.Root())

	_, err = d.Run(record.NewRunID(time.Now()))
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.NoDirExists(t, d.Logs.Root())
}

func TestStatusActiveRuns(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 5)
	alive := admit(t, d, "alive")
	orphan := admit(t, d, "orphan")
	orphanize(t, d, orphan)
	dead := admit(t, d, "dead")
	releaseAll(dead)

	before := treeSnapshot(t, d.Logs.Root())
	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	assert.Equal(t, before, treeSnapshot(t, d.Logs.Root()), "status changes nothing")

	assert.True(t, snap.ConfigExists)
	assert.Equal(t, 5, snap.MaximumInProgress)
	assert.Equal(t, 2, snap.SlotsInUse, "the live run and the orphan hold slots; the dead run does not")
	require.Len(t, snap.Active, 3)
	byTask := map[string]vocab.RunView{}
	for _, v := range snap.Active {
		byTask[v.Task] = v
	}

	a := byTask["alive"]
	assert.Equal(t, alive.Rec.RunID, a.RunID)
	assert.Equal(t, record.Provisioning, a.State)
	assert.True(t, a.OwnerAlive)
	assert.True(t, a.SupervisorAlive)
	assert.False(t, a.Orphaned)
	assert.True(t, a.HoldsSlot)
	assert.Equal(t, os.Getpid(), a.SupervisorPID)
	assert.Empty(t, a.LogPath, "no log before the command starts")

	o := byTask["orphan"]
	assert.True(t, o.OwnerAlive)
	assert.False(t, o.SupervisorAlive)
	assert.True(t, o.Orphaned)
	assert.True(t, o.HoldsSlot)

	x := byTask["dead"]
	assert.False(t, x.OwnerAlive)
	assert.False(t, x.SupervisorAlive)
	assert.False(t, x.Orphaned)
	assert.False(t, x.HoldsSlot)
	assert.Contains(t, x.Reason, fmt.Sprintf("owner process %d is gone", os.Getpid()))

	// A task filter keeps that task's runs; the count stays global.
	snap, err = d.Status(vocab.StatusQuery{Task: "orphan"})
	require.NoError(t, err)
	require.Len(t, snap.Active, 1)
	assert.Equal(t, orphan.Rec.RunID, snap.Active[0].RunID)
	assert.Equal(t, 2, snap.SlotsInUse)

	// One run by id.
	v, err := d.Run(alive.Rec.RunID)
	require.NoError(t, err)
	assert.Equal(t, "alive", v.Task)
	assert.True(t, v.HoldsSlot)
}

func TestStatusFinishedNewestFirstAtMostTen(t *testing.T) {
	d := newDispatcher(t)
	var ids []record.RunID
	for i := range vocab.FinishedShown + 2 {
		task := "even"
		if i%2 == 1 {
			task = "odd"
		}
		req, _, _ := startRequest(task, "sh", "-c", fmt.Sprintf("exit %d", i%2))
		_, id, err := startCode(d, req)
		if i%2 == 1 {
			require.ErrorAs(t, err, new(*vocab.ExitError))
		} else {
			require.NoError(t, err)
		}
		ids = append(ids, id)
	}

	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	require.Len(t, snap.Finished, vocab.FinishedShown)
	for i, v := range snap.Finished {
		assert.Equal(t, ids[len(ids)-1-i], v.RunID, "finished[%d]", i)
		assert.False(t, v.HoldsSlot)
		assert.False(t, v.OwnerAlive)
		assert.Equal(t, lay(d).log(v.RunID), v.LogPath)
		require.NotNil(t, v.ExitCode)
	}
	assert.Equal(t, record.Failed, snap.Finished[0].State)
	assert.Equal(t, record.Succeeded, snap.Finished[1].State)
	assert.Empty(t, snap.Active)
	assert.Equal(t, 0, snap.SlotsInUse)

	snap, err = d.Status(vocab.StatusQuery{Task: "even"})
	require.NoError(t, err)
	require.Len(t, snap.Finished, (vocab.FinishedShown+2)/2)
	for _, v := range snap.Finished {
		assert.Equal(t, "even", v.Task)
	}

	v, err := d.Run(ids[0])
	require.NoError(t, err, "a run older than the listing is still found by id")
	assert.Equal(t, record.Succeeded, v.State)
}

func TestStatusReportsProblems(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 3)
	_, freePath := writeCorruptActive(t, d, "{")
	heldID, heldPath := writeCorruptActive(t, d, `{"version": 99}`)
	holdOwner(t, lay(d).ownerLock(heldID))
	foreign := filepath.Join(lay(d).activeDir(), "README")
	require.NoError(t, os.WriteFile(foreign, []byte("hi"), 0o600))
	// A temporary file of an interrupted write is not a problem.
	require.NoError(t, os.WriteFile(filepath.Join(lay(d).activeDir(), ".r-tmp.json123"), nil, 0o600))

	// A corrupt finished record.
	req, _, _ := startRequest("done", "true")
	_, doneID, err := startCode(d, req)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(lay(d).done(doneID), []byte("torn"), 0o600))

	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	assert.Equal(t, 1, snap.SlotsInUse, "only the record whose owner is alive counts")
	assert.Empty(t, snap.Active)
	assert.Empty(t, snap.Finished)
	byPath := map[string]vocab.Problem{}
	var unnamed []vocab.Problem
	for _, p := range snap.Problems {
		if p.Path == "" {
			unnamed = append(unnamed, p)
			continue
		}
		byPath[p.Path] = p
	}
	require.Len(t, snap.Problems, 4)
	assert.False(t, byPath[freePath].HoldsSlot)
	assert.False(t, byPath[freePath].OwnerAlive)
	assert.NotEmpty(t, byPath[freePath].Error)
	assert.True(t, byPath[heldPath].HoldsSlot)
	assert.True(t, byPath[heldPath].OwnerAlive)
	assert.Contains(t, byPath[heldPath].Error, "unknown record version 99")
	assert.Contains(t, byPath[foreign].Error, "foreign file")
	assert.False(t, byPath[foreign].HoldsSlot)
	assert.Empty(t, unnamed, "every problem names its file")
	assert.Contains(t, byPath[lay(d).done(doneID)].Error, lay(d).done(doneID))
}

// A broken crew.json does not blind status: it shows the runs, and the
// problem with its place in the file.
func TestStatusCorruptConfig(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 2)
	res := admit(t, d, "running")
	require.NoError(t, os.WriteFile(lay(d).config(), []byte("{"), 0o600))
	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err, "status shows what it can")
	p := snap.ConfigError
	require.NotNil(t, p)
	assert.Equal(t, lay(d).config(), p.Path)
	assert.Equal(t, [2]int{1, 2}, [2]int{p.Line, p.Column})
	assert.True(t, strings.HasPrefix(p.Error, lay(d).config()+":1:2: malformed JSON: "), p.Error)
	assert.Contains(t, p.Error, "crew init --max N")
	assert.Zero(t, snap.MaximumInProgress, "the cap is unknown")
	assert.Equal(t, 1, snap.SlotsInUse)
	require.Len(t, snap.Active, 1)
	assert.Equal(t, res.Rec.RunID, snap.Active[0].RunID)
}

// When a run's owner cannot be probed (here: its owner lock file was
// replaced by a FIFO, which crew refuses to open), admission counts the
// run as holding its slot (fail closed), and status says the same: the
// slot is in use, held by that run, whose owner is "unknown". Both ask the
// one liveness function.
func TestProbeErrorStatusAgreesWithAdmission(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	res := admit(t, d, "unprobeable")
	releaseAll(res) // its processes are gone; only the probe could tell
	lockPath := lay(d).ownerLock(res.Rec.RunID)
	require.NoError(t, os.Remove(lockPath))
	require.NoError(t, syscall.Mkfifo(lockPath, 0o600))

	_, err := d.Admit(context.Background(), admitReq("next"))
	var refused *vocab.RefusedError
	require.ErrorAs(t, err, &refused, "admission must count a run it cannot probe")
	assert.Equal(t, 1, refused.InUse)

	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	assert.Equal(t, refused.InUse, snap.SlotsInUse, "status and admission agree on the slots in use")
	require.Len(t, snap.Active, 1)
	v := snap.Active[0]
	assert.Equal(t, res.Rec.RunID, v.RunID)
	assert.True(t, v.HoldsSlot)
	assert.True(t, v.OwnerAlive, "ownerAlive is fail-closed too")
	assert.Equal(t, "unknown", v.Owner)
	// And admission did not reap it: the record is still active.
	assert.FileExists(t, lay(d).active(res.Rec.RunID))
}
