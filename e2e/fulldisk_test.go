package e2e

// Issue 10, item 10: a full disk never loses a run's exit status. When the
// final record cannot be written, the supervisor keeps the outcome in the
// run's owner lock file (room for it was made at admission), retries while
// holding the slot and says so; if it gives up (exit 125) or dies,
// whoever finalizes the run next records the outcome it kept.

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

// The failpoint makes every write of a final record fail with ENOSPC, as
// a full disk would.
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
	assert.Contains(t, stderr, ": no space left on device; the outcome is kept in "+filepath.Join(e.root, "owners", id+".lock")+"; retrying for up to 1m0s while holding the slot")
	assert.Equal(t, 1, strings.Count(stderr, "cannot record it"), "said once: %s", stderr)
}

// Interrupted while it retries, crew exits 125 and leaves the outcome;
// until then the run holds its slot. `crew recover` then records the run
// as it ended: succeeded, exit 0, and why recovery did it.
func TestFullDiskGiveUpKeepsTheOutcome(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	p, id, openGate := e.startUnrecordable("full", finishENOSPC)
	openGate()
	awaitNotice(t, e, p, id)
	s := e.status()
	assert.Equal(t, 1, s.SlotsInUse, "the slot stays held while crew retries")
	late := e.run("start", "late", "--", "true")
	assert.Equal(t, 75, late.Code, late.Stderr)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM)) // our own child
	r := p.wait(t, 10*time.Second)
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: full: run "+id+" ended (succeeded, exit 0), but crew could not record it: ")
	assert.Contains(t, r.Stderr, "no space left on device (gave up on receiving SIGTERM); the outcome is kept in "+
		filepath.Join(e.root, "owners", id+".lock")+", and `crew recover` records it once the state root is writable again")
	assert.Equal(t, 0, e.status().SlotsInUse, "crew is gone, and the slot with it")

	rep, rr := e.recover()
	require.Equal(t, 0, rr.Code, rr.Stderr)
	require.Equal(t, []string{"finalized"}, rep.outcomesFor(id))
	rec := e.runRecord(id)
	assert.Equal(t, "succeeded", rec.State)
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 0, *rec.ExitCode)
	assert.Regexp(t, `^its supervisor \(pid \d+\) could not record this end \(record run `+id+` as succeeded in \S+: no space left on device\) and kept it in the owner lock file; crew process \d+ recorded it at `, rec.Reason)
	assert.NotContains(t, rec.Reason, "unknown")
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
	assert.Contains(t, rec.Reason, "could not record this end")
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

// Room for the outcome is made at admission: the owner lock file of a
// running run already holds the reserved bytes, and nothing else.
func TestOutcomeRoomIsReservedAtAdmission(t *testing.T) {
	e := newEnv(t)
	gate, openGate := e.gate("exit")
	p := e.start(nil, append([]string{"start", "t", "--"}, waitCmd(gate)...)...)
	id := e.activeRun("t").RunID
	b, err := os.ReadFile(filepath.Join(e.root, "owners", id+".lock"))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(b), 512)
	assert.True(t, strings.HasPrefix(string(b), "crew: room reserved for this run's outcome"), "%q", b[:min(len(b), 80)])
	openGate()
	assert.Equal(t, 0, p.wait(t, 10*time.Second).Code)
}
