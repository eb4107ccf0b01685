package e2e

// crew start --detach --wait (issue 24, item 6): a fire-and-forget queue.
// A start that is not admitted at once joins the queue, prints its id and
// returns; a background waiter of its own waits in its place and then
// supervises the run as a detached supervisor does.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdOnly fills a cap-1 root with a run blocked on a gate, and returns
// the gate's opener.
func (e *env) holdOnly() (open func()) {
	e.t.Helper()
	e.initMax(1)
	open, _ = e.holdSlot("holder")
	return open
}

// returns runs crew with args, which must return while the slot is held:
// a start that waited in the foreground instead fails the test, held by
// the gate, when the deadline passes.
func (e *env) returns(args ...string) result {
	e.t.Helper()
	return e.start(nil, args...).wait(e.t, time.Minute)
}

// startInBackground runs crew start --detach --wait with args, which must
// return at once (the slot is held), and returns the id it printed. The
// test's cleanup asks a start still in line to leave it: no background
// waiter outlives the test.
func (e *env) startInBackground(args ...string) string {
	e.t.Helper()
	r := e.returns(append([]string{"start", "--detach", "--wait"}, args...)...)
	require.Equal(e.t, 0, r.Code, "crew start --detach --wait %v: %s", args, r.Stderr)
	id := strings.TrimSpace(r.Stdout)
	require.True(e.t, strings.HasPrefix(id, "r-") && !strings.ContainsAny(id, " \n"), "stdout is the run id alone: %q", r.Stdout)
	e.t.Cleanup(func() { e.leaveLine(id) })
	return id
}

// leaveLine asks a start still in line to leave it (crew stop of a waiting
// start is a request, never a signal).
func (e *env) leaveLine(id string) {
	for _, q := range e.line() {
		if q.RunID == id {
			_, _ = e.tryRun("stop", id)
		}
	}
}

type lineJSON struct {
	Position int    `json:"position"`
	Task     string `json:"task"`
	RunID    string `json:"runId"`
}

// line is the queue as crew status --json shows it; it never fails the
// test (cleanups call it).
func (e *env) line() []lineJSON {
	r, err := e.tryRun("status", "--json")
	if err != nil || r.Code != 0 {
		return nil
	}
	var s struct {
		Queue []lineJSON `json:"queue"`
	}
	_ = json.Unmarshal([]byte(r.Stdout), &s)
	return s.Queue
}

// marker is a command that leaves a file behind when it runs, then exits
// with code.
func (e *env) marker(name string, code int) (path string, cmd []string) {
	path = filepath.Join(e.dir, name+".ran")
	return path, []string{"sh", "-c", `echo ran-"$1"; : > "$0"; exit "$2"`, path, name, fmt.Sprint(code)}
}

// Three --detach --wait starts at cap 1 return while the holder still
// holds its gate (a foreground --wait would not return before it opens),
// each printing its id; crew status, crew logs -f, crew wait work on the
// ids at once, and once the slot frees each runs and its exit code is
// crew wait's.
func TestDetachWaitReturnsInLine(t *testing.T) {
	e := newEnv(t)
	openHolder := e.holdOnly()
	ids := make([]string, 3)
	for i := range ids {
		_, cmd := e.marker(fmt.Sprintf("q%d", i), 10+i)
		r := e.returns(append([]string{"start", "--detach", "--wait", fmt.Sprintf("q%d", i), "--"}, cmd...)...)
		require.Equal(t, 0, r.Code, "start %d: %s", i, r.Stderr)
		ids[i] = strings.TrimSpace(r.Stdout)
		t.Cleanup(func() { e.leaveLine(ids[i]) })
		assert.Equal(t, fmt.Sprintf("crew: q%d: run %s waits in line in the background (waiting for a slot: %s in line, 1/1 slots busy", i, ids[i], ordinalOf(i+1)),
			strings.SplitN(r.Stderr, " (oldest", 2)[0])
	}
	line := e.line()
	require.Len(t, line, 3, "the three starts wait in line")
	for i, q := range line {
		assert.Equal(t, ids[i], q.RunID, "place %d", i+1)
	}
	r := e.run("status", ids[1])
	assert.Equal(t, 0, r.Code, "crew status of a waiting start's id: %s", r.Stderr)
	assert.Contains(t, r.Stdout, ids[1])

	// crew logs -f follows the run from its place in line to its end.
	logs := e.start(nil, "logs", "-f", ids[0])
	openHolder()
	for i, id := range ids {
		r := e.run("wait", id)
		assert.Equal(t, 10+i, r.Code, "crew wait %s: %s", id, r.Stderr)
	}
	lr := logs.wait(t, 30*time.Second)
	assert.Equal(t, "ran-q0\n", lr.Stdout, "crew logs -f of the first: %s", lr.Stderr)
	rec := e.runRecord(ids[2])
	assert.Equal(t, "failed", rec.State)
	assert.NotZero(t, rec.SupervisorPID)
	r = e.run("logs", ids[2])
	assert.Equal(t, "ran-q2\n", r.Stdout, "the output goes to the run's log")
}

func ordinalOf(n int) string {
	return map[int]string{1: "1st", 2: "2nd", 3: "3rd"}[n]
}

// --json prints the id and the place in line as JSON; --quiet says
// nothing on stderr; a start admitted at once prints the id as --detach
// always did.
func TestDetachWaitJSON(t *testing.T) {
	e := newEnv(t)
	openHolder := e.holdOnly()
	r := e.returns("start", "--detach", "--wait", "--json", "--quiet", "j", "--", "true")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Empty(t, r.Stderr, "--quiet")
	var out struct {
		Version  int    `json:"version"`
		RunID    string `json:"runId"`
		Queued   bool   `json:"queued"`
		Position int    `json:"position"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &out), r.Stdout)
	t.Cleanup(func() { e.leaveLine(out.RunID) })
	assert.Equal(t, 1, out.Version)
	assert.True(t, out.Queued)
	assert.Equal(t, 1, out.Position)
	assert.True(t, strings.HasPrefix(out.RunID, "r-"), out.RunID)
	openHolder()
	assert.Equal(t, 0, e.run("wait", out.RunID).Code)

	r = e.run("start", "--detach", "--wait", "--json", "k", "--", "true")
	require.Equal(t, 0, r.Code, r.Stderr)
	var now map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &now), r.Stdout)
	assert.NotContains(t, now, "queued", "admitted at once: no place in line")
	assert.Equal(t, 0, e.run("wait", now["runId"].(string)).Code)
}

// crew stop of a background waiter: it leaves the line, the command never
// runs, and crew wait says so with the code a stopped start has.
func TestDetachWaitStopped(t *testing.T) {
	e := newEnv(t)
	openHolder := e.holdOnly()
	ran, cmd := e.marker("s", 0)
	id := e.startInBackground(append([]string{"s", "--"}, cmd...)...)
	r := e.run("stop", id)
	assert.Equal(t, 0, r.Code, "crew stop of a background waiter: %s", r.Stderr)
	r = e.run("wait", id)
	assert.Equal(t, 143, r.Code, "crew wait of a start stopped in line: %s", r.Stderr)
	assert.Regexp(t, `^crew: s: run `+id+` never ran: it left the queue stopped: stopped by crew stop \(pid \d+, user [^)]+\) while waiting for admission; nothing was started\n$`, r.Stderr)
	assert.Empty(t, e.line(), "the line is empty")
	rec := e.runRecord(id)
	assert.Equal(t, "stopped", rec.State)
	assert.Equal(t, "SIGTERM", rec.Signal)
	openHolder()
	assert.Equal(t, 0, e.run("wait", "holder").Code)
	assert.NoFileExists(t, ran, "the stopped start's command ran")
}

// --wait=D runs out in the background: the start never runs, and crew
// wait on its id exits as the start would have (75, or --refused-exit's
// code), saying why.
func TestDetachWaitGivesUp(t *testing.T) {
	e := newEnv(t)
	e.holdOnly()
	ran, cmd := e.marker("d", 0)
	id := e.startInBackground(append([]string{"--wait=300ms", "d", "--"}, cmd...)...)
	r := e.run("wait", id)
	assert.Equal(t, 75, r.Code, "crew wait of a start whose --wait=D ran out: %s", r.Stderr)
	assert.Contains(t, r.Stderr, "crew: d: run "+id+" never ran: it left the queue failed: not admitted: gave up after waiting 300ms in the queue; all slots are busy (1/1 in use)")
	rec := e.runRecord(id)
	assert.Equal(t, "failed", rec.State)
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 75, *rec.ExitCode)

	id = e.startInBackground(append([]string{"--wait=300ms", "--refused-exit", "9", "d", "--"}, cmd...)...)
	r = e.run("wait", id)
	assert.Equal(t, 9, r.Code, "--refused-exit 9: %s", r.Stderr)
	assert.Empty(t, e.line(), "the line is empty")
	assert.NoFileExists(t, ran, "a start that gave up ran its command")

	// Its record keeps its labels: once it has left the line (its ticket,
	// which had them too, gone), crew wait --label still finds it.
	id = e.startInBackground(append([]string{"--wait=300ms", "--label", "pipeline=5", "d", "--"}, cmd...)...)
	assert.Equal(t, 75, e.run("wait", id).Code)
	r = e.run("wait", "--label", "pipeline=5")
	assert.Equal(t, 75, r.Code, "crew wait --label of a labelled start that gave up: %s", r.Stderr)
	assert.Contains(t, r.Stderr, "crew: 1 of 1 runs with label pipeline=5 did not succeed:\n")
	assert.Contains(t, r.Stderr, "  "+id+"  d  failed, exit 75\n")
	assert.NoFileExists(t, ran, "a start that gave up ran its command")
}

// A background waiter killed with SIGKILL frees its place at once: crew
// status shows no ghost, the start behind it goes first, and crew wait on
// the dead one's id says it died in line.
func TestDetachWaitKilled(t *testing.T) {
	e := newEnv(t)
	openHolder := e.holdOnly()
	ranFirst, cmd := e.marker("first", 0)
	first := e.startInBackground(append([]string{"first", "--"}, cmd...)...)
	_, cmd = e.marker("second", 4)
	second := e.startInBackground(append([]string{"--label", "stage=second", "second", "--"}, cmd...)...)

	w := proveBackgroundWaiter(t, first, e.crewIdentity())
	require.NoError(t, w.signal(syscall.SIGKILL))
	eventually(t, 20*time.Second, "the killed waiter's place to go", func() bool {
		line := e.line()
		return len(line) == 1 && line[0].RunID == second
	})
	// The next admission (the start behind it, a refused start) may
	// remove the dead ticket at any moment; before it does, crew wait
	// learns of the death from the ticket, after, from the record it
	// left: the same answer either way.
	died := "its waiting start died in line (killed?), and its place in line is free"
	r := e.run("wait", first)
	assert.Equal(t, 125, r.Code, "crew wait of a killed background waiter: %s", r.Stderr)
	assert.Contains(t, r.Stderr, "run "+first+" never ran: ")
	assert.Contains(t, r.Stderr, died)
	refused := e.run("start", "--lock-timeout", "10s", "probe", "--", "true")
	assert.Equal(t, 75, refused.Code, "a start while the slot is held: %s", refused.Stderr)
	rec := e.runRecord(first)
	assert.Equal(t, "failed", rec.State, "the killed waiter's start has the record of a start that never ran")
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 125, *rec.ExitCode)
	assert.Equal(t, died, rec.Reason)
	r = e.run("wait", first)
	assert.Equal(t, 125, r.Code, "crew wait of a killed background waiter, its ticket removed: %s", r.Stderr)
	assert.Equal(t, "crew: first: run "+first+" never ran: it left the queue failed: "+died+"\n", r.Stderr)
	openHolder()
	r = e.run("wait", second)
	assert.Equal(t, 4, r.Code, "the start behind the killed one runs: %s", r.Stderr)
	r = e.run("wait", "--label", "stage=second")
	assert.Equal(t, 4, r.Code, "crew wait --label of the run its background waiter admitted: %s", r.Stderr)
	assert.Contains(t, r.Stderr, "  "+second+"  second  failed, exit 4\n", "the run admitted in the background keeps its labels")
	assert.NoFileExists(t, ranFirst)
}

// proveBackgroundWaiter finds the background waiter of id (crew __wait
// ... id) and proves it is this test's own (it shows ident: the test's
// own state root or store).
func proveBackgroundWaiter(t *testing.T, id string, ident identity) *ownProc {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc to find the background waiter in: %v", err)
	}
	for _, ent := range entries {
		pid := 0
		if _, err := fmt.Sscan(ent.Name(), &pid); err != nil {
			continue
		}
		argv, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		args := strings.Split(string(argv), "\x00")
		if err != nil || len(args) < 3 || args[1] != "__wait" || !strings.Contains(string(argv), "\x00"+id+"\x00") {
			continue
		}
		p, err := proveProc(pid, ident)
		requireProof(t, err, "prove the background waiter of "+id)
		t.Cleanup(p.release)
		return p
	}
	t.Fatalf("no background waiter of %s", id)
	return nil
}

// The place in line is never free during the handover: crew start killed
// (SIGKILL) the moment its background waiter holds the place, before it
// has let go of it itself, leaves the place held by the background
// waiter, whose run then runs.
func TestDetachWaitHandOverHasNoGap(t *testing.T) {
	e := newEnv(t)
	openHolder := e.holdOnly()
	_, cmd := e.marker("h", 6)
	p := e.start([]string{"CREW_FAILPOINT=waiter-handover:kill"}, append([]string{"start", "--detach", "--wait", "h", "--"}, cmd...)...)
	r := p.wait(t, time.Minute)
	require.Equal(t, 137, r.Code, "crew start killed at the handover: %s", r.Stderr)
	line := e.line()
	require.Len(t, line, 1, "the background waiter holds the place")
	t.Cleanup(func() { e.leaveLine(line[0].RunID) })
	openHolder()
	r = e.run("wait", line[0].RunID)
	assert.Equal(t, 6, r.Code, "the run that waited in line: %s", r.Stderr)
}
