package e2e

// Issue 10, item 10: a full disk never loses a run's exit status. The
// final record is written into the run's own record file, into a slot
// allocated at admission, and made durable there; what a full disk can
// still fail is its move into runs/done (a new shard). Then the supervisor
// says so and retries; the run is final already (its slot is free), and
// if crew gives up (exit 125) or dies, whoever finalizes the run next
// moves the record it kept.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The failpoint makes every move of a final record into runs/done (and
// every write of one, for a run of an older crew) fail with ENOSPC, as a
// full disk would.
const finishENOSPC = "CREW_FAILPOINT=finish-write:error:ENOSPC"

// retryNotice is the start of what crew says when it cannot record a run
// (after "crew: TASK: ").
func retryNotice(id string) string {
	return "crew: full: warning: run " + id + " ended (succeeded, exit 0), but crew cannot record it: record run " + id + " as succeeded in "
}

// startUnrecordable starts a run whose command exits 0 once the returned
// gate opens, with final writes failing as on a full disk.
func (e *env) startUnrecordable(task string, failpoint string) (p *proc, id string, openGate func()) {
	e.t.Helper()
	gate, openGate := e.gate(task + "-exit")
	p = e.start([]string{failpoint}, append([]string{"start", task, "--"}, waitCmd(gate)...)...)
	return p, e.activeRun(task).RunID, openGate
}

// awaitNotice waits until crew says it is retrying, and checks it said so
// once, naming the error, the kept outcome and what it does.
func awaitNotice(t *testing.T, e *env, p *proc, id string) {
	t.Helper()
	eventually(t, 10*time.Second, "crew to say it cannot record the run", func() bool {
		return strings.Contains(p.errb.String(), "retrying for up to")
	})
	stderr := p.errb.String()
	assert.Contains(t, stderr, retryNotice(id))
	assert.Contains(t, stderr, ": no space left on device; the outcome is kept in "+filepath.Join(e.root, "runs", "active", id+".run")+"; retrying for up to 1m0s (interrupt crew to give up")
	assert.Equal(t, 1, strings.Count(stderr, "cannot record it"), "said once: %s", stderr)
}

// Interrupted while it retries, crew exits 125 and leaves the outcome,
// final and durable in runs/active: the run holds no slot, status shows
// it finished, and `crew recover` moves it into runs/done as it ended:
// succeeded, exit 0.
func TestFullDiskGiveUpKeepsTheOutcome(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	p, id, openGate := e.startUnrecordable("full", finishENOSPC)
	openGate()
	awaitNotice(t, e, p, id)
	s := e.status()
	assert.Equal(t, 0, s.SlotsInUse, "the outcome is durable: the slot is free while crew retries the move")
	assert.Equal(t, "succeeded", e.runRecord(id).State)
	late := e.run("start", "late", "--", "true")
	assert.Equal(t, 0, late.Code, late.Stderr)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM)) // our own child
	r := p.wait(t, 10*time.Second)
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: full: run "+id+" ended (succeeded, exit 0), but crew could not record it: ")
	assert.Contains(t, r.Stderr, "no space left on device (gave up on receiving SIGTERM); the outcome is kept in "+
		filepath.Join(e.root, "runs", "active", id+".run")+", and `crew recover` records it once the state root is writable again")
	assert.Equal(t, 0, e.status().SlotsInUse, "crew is gone, and the slot with it")

	rep, rr := e.recover()
	require.Equal(t, 0, rr.Code, rr.Stderr)
	require.Equal(t, []string{"cleaned"}, rep.outcomesFor(id))
	rec := e.runRecord(id)
	assert.Equal(t, "succeeded", rec.State)
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 0, *rec.ExitCode)
	assert.Empty(t, rec.Reason, "the supervisor's own final record")
	assert.FileExists(t, doneRecordPath(t, e.root, id))
	assert.NoFileExists(t, filepath.Join(e.root, "runs", "active", id+".run"))
	again, _ := e.recover()
	assert.Zero(t, again.changes())
}

// Killed while it retries, crew leaves the outcome behind too: `crew wait`
// finalizes the run from it and exits with the command's code, 0, not 125
// ("exit status unknown").
func TestFullDiskSupervisorKilledWhileRetrying(t *testing.T) {
	e := newEnv(t)
	p, id, openGate := e.startUnrecordable("full", finishENOSPC)
	openGate()
	awaitNotice(t, e, p, id)
	require.NoError(t, p.cmd.Process.Kill()) // our own child
	assert.Equal(t, 137, p.wait(t, 10*time.Second).Code)

	w := e.run("wait", id)
	assert.Equal(t, 0, w.Code, w.Stderr)
	rec := e.runRecord(id)
	assert.Equal(t, "succeeded", rec.State)
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 0, *rec.ExitCode)
	assert.Empty(t, rec.Reason, "the supervisor's own final record")
}

// Space comes back while crew retries: it records the run itself, says so,
// and exits with the command's code.
func TestFullDiskRecoversWhileRetrying(t *testing.T) {
	e := newEnv(t)
	space, spaceBack := e.gate("space")
	p, id, openGate := e.startUnrecordable("full", "CREW_FAILPOINT=finish-write:error:ENOSPC:"+space)
	openGate()
	awaitNotice(t, e, p, id)
	spaceBack()
	r := p.wait(t, 20*time.Second)
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: full: warning: run "+id+": its end is recorded after all (succeeded, exit 0)")
	rec := e.runRecord(id)
	assert.Equal(t, "succeeded", rec.State)
	assert.Empty(t, rec.Reason)
	assert.NoFileExists(t, filepath.Join(e.root, "owners", id+".lock"))
	rep, _ := e.recover()
	assert.Zero(t, rep.changes())
}

// Room for the outcome is made at admission: a running run's record file
// holds two slots, allocated then, and the final record is written into
// it and moved, never rewritten into a new file; its owner lock file is
// empty, so removing it frees no data block.
func TestOutcomeRoomIsReservedAtAdmission(t *testing.T) {
	e := newEnv(t)
	gate, openGate := e.gate("exit")
	p := e.start(nil, append([]string{"start", "t", "--"}, waitCmd(gate)...)...)
	id := e.activeRun("t").RunID
	lock, err := os.Stat(filepath.Join(e.root, "owners", id+".lock"))
	require.NoError(t, err)
	assert.Zero(t, lock.Size(), "the owner lock file is empty")
	active, err := os.Stat(filepath.Join(e.root, "runs", "active", id+".run"))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, active.Size(), int64(2*1024), "two slots, each with room to grow")
	assert.Zero(t, active.Size()%1024, "two slots of whole sectors")
	openGate()
	assert.Equal(t, 0, p.wait(t, 10*time.Second).Code)
	done, err := os.Stat(doneRecordPath(t, e.root, id))
	require.NoError(t, err)
	assert.True(t, os.SameFile(active, done), "the record file was moved into runs/done, not written anew")
	assert.Equal(t, active.Size(), done.Size(), "the final record fit the room made at admission")
}
