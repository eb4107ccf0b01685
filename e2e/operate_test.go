package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var runIDPattern = `^r-\d{8}T\d{6}\.\d{9}Z-[0-9a-f]{16}$`

// killDetachedAtCleanup kills whatever a detached run left: the process
// group and the supervisor its record names, each only if it proves then
// to be this run's (the group) or this test's (the supervisor).
func (e *env) killDetachedAtCleanup(id string) {
	t := e.t
	t.Cleanup(func() {
		r, err := e.tryRun("status", "--json", id)
		var v runJSON
		if err != nil || r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &v) != nil {
			t.Logf("clean-up cannot read run %s, so kills nothing of it: %v %s", id, err, r.Stderr)
			return
		}
		if v.PGID != 0 {
			if g, err := newGroup(v.PGID, runIdentity(id)); err != nil {
				t.Logf("not killing process group %d of run %s: %v", v.PGID, id, err)
			} else {
				if err := g.signal(syscall.SIGKILL); err != nil && !errors.Is(err, errGone) {
					t.Logf("not killing process group %d of run %s: %v", v.PGID, id, err)
				}
				g.release()
			}
		}
		if v.SupervisorAlive && v.SupervisorPID != 0 {
			killProven(t, "the supervisor of run "+id, v.SupervisorPID, e.crewIdentity())
		}
	})
}

func TestDetachWaitAndLogs(t *testing.T) {
	e := newEnv(t)
	gate, openGate := e.gate("go-on")
	r := e.run("start", "--detach", "bg", "--", "sh", "-c", `echo before; while [ ! -e "$1" ]; do sleep 0.01; done; echo after; echo oops >&2; exit 7`, "x", gate)
	require.Equal(t, 0, r.Code, r.Stderr)
	id := strings.TrimSpace(r.Stdout)
	require.Regexp(t, runIDPattern, id)
	e.killDetachedAtCleanup(id)

	// The record says running the moment --detach returns.
	rec := e.runRecord(id)
	assert.Equal(t, "running", rec.State)
	assert.True(t, rec.SupervisorAlive)
	assert.NotEqual(t, 0, rec.TaskPID)

	// logs -f streams what is written after it started following.
	follow := e.command(nil, "logs", "-f", "bg")
	out, err := follow.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, follow.Start())
	lines := bufio.NewReader(out)
	first, err := lines.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "before\n", first)

	waiter := e.start(nil, "wait", id)
	openGate()
	rest, err := io.ReadAll(lines)
	require.NoError(t, err)
	// stdout and stderr reach the log through two pipes: each stream keeps
	// its order, but which of two near-simultaneous lines lands first is
	// not fixed.
	assert.ElementsMatch(t, []string{"after", "oops"}, strings.Fields(string(rest)))
	err = follow.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 7, ee.ExitCode(), "logs -f exits like crew wait")

	w := waiter.wait(t, 10*time.Second)
	assert.Equal(t, 7, w.Code, w.Stderr)
	assert.Equal(t, 7, e.run("wait", "bg").Code, "a task name means its latest run once it finished")

	logs := e.run("logs", id)
	assert.Equal(t, 0, logs.Code)
	assert.True(t, strings.HasPrefix(logs.Stdout, "before\n"), logs.Stdout)
	assert.ElementsMatch(t, []string{"before", "after", "oops"}, strings.Fields(logs.Stdout))
	rec = e.runRecord(id)
	assert.Equal(t, "failed", rec.State)
}

// TestDetachHandover holds the parent between "supervisor started" and
// "parent exited", and even kills it there: an admission in between sees
// the slot as held all along.
func TestDetachHandover(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	gate, openGate := e.gate("handover")
	cmdGate, openCmd := e.gate("cmd")
	t.Cleanup(func() { _ = os.WriteFile(cmdGate, nil, 0o600) })
	parent := e.start([]string{"CREW_FAILPOINT=detach-handover:wait:" + gate}, append([]string{"start", "--detach", "bg", "--"}, waitCmd(cmdGate)...)...)
	eventually(t, 10*time.Second, "the parent to reach the handover", func() bool { return exists(gate + ".reached") })

	r := e.run("start", "other", "--", "true")
	assert.Equal(t, 75, r.Code, "slot free during the handover: %s", r.Stderr)
	require.NoError(t, parent.cmd.Process.Signal(syscall.SIGKILL))
	parent.wait(t, 10*time.Second)
	r = e.run("start", "other", "--", "true")
	assert.Equal(t, 75, r.Code, "slot free after the parent died mid-handover: %s", r.Stderr)

	s := e.status()
	require.Len(t, s.Active, 1)
	id := s.Active[0].RunID
	e.killDetachedAtCleanup(id)
	openGate() // nobody waits on it any more
	eventually(t, 10*time.Second, "the detached run to be running", func() bool { return e.runRecord(id).State == "running" })
	openCmd()
	w := e.run("wait", "--timeout", "10s", id)
	assert.Equal(t, 0, w.Code, w.Stderr)
	assert.Equal(t, 0, e.run("start", "other", "--", "true").Code)
}

// stopCase starts a run in one of three ways and returns its record and
// the path of a file its grandchild's pid is written to.
func TestStop(t *testing.T) {
	for _, mode := range []string{"foreground", "detached", "orphan"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			e.initMax(1)
			pidFile := filepath.Join(e.dir, "grandchild")
			// The command runs a grandchild that ignores SIGTERM, so only
			// the SIGKILL after the grace period ends it.
			cmd := []string{"sh", "-c", `sh -c 'trap "" TERM; echo $$ > "$1"; while :; do sleep 0.05; done' x "$1" & wait`, "x", pidFile}
			var fg *proc
			var id string
			switch mode {
			case "detached":
				r := e.run(append([]string{"start", "--detach", "victim", "--"}, cmd...)...)
				require.Equal(t, 0, r.Code, r.Stderr)
				id = strings.TrimSpace(r.Stdout)
			default:
				fg = e.start(nil, append([]string{"start", "victim", "--"}, cmd...)...)
				id = e.activeRun("victim").RunID
			}
			run := e.activeRun("victim")
			e.killRunAtCleanup(run)
			eventually(t, 10*time.Second, "the grandchild to start", func() bool { return exists(pidFile) })
			if mode == "orphan" {
				require.Equal(t, fg.cmd.Process.Pid, run.SupervisorPID, "the supervisor is the crew start the test ran")
				require.NoError(t, fg.cmd.Process.Signal(syscall.SIGKILL))
				fg.wait(t, 10*time.Second)
				eventually(t, 10*time.Second, "status to flag the orphan", func() bool {
					a := e.status().Active
					return len(a) == 1 && a[0].Orphaned
				})
			}

			r := e.run("stop", "--grace", "300ms", "victim")
			require.Equal(t, 0, r.Code, r.Stderr)
			assert.Contains(t, r.Stderr, "crew: victim: run "+id+" stopped: stopped by crew stop (pid ")
			assert.False(t, groupAlive(run.PGID), "the whole process group is gone, grandchild included")

			rec := e.runRecord(id)
			assert.Equal(t, "stopped", rec.State)
			assert.Equal(t, "SIGTERM", rec.Signal)
			assert.Contains(t, rec.Reason, "stopped by crew stop (pid ")
			assert.Contains(t, rec.Reason, "user ")
			assert.Contains(t, rec.Reason, "SIGKILL after the 300ms grace period")
			if mode == "orphan" {
				assert.Contains(t, rec.Reason, "was already gone")
				assert.Nil(t, rec.ExitCode)
			}
			if mode == "foreground" {
				assert.Equal(t, 143, fg.wait(t, 10*time.Second).Code)
			}
			s := e.status()
			assert.Zero(t, s.SlotsInUse)
			assert.Equal(t, 0, e.run("start", "next", "--", "true").Code, "the slot is free")
			// Stopping it again does nothing.
			r = e.run("stop", "victim")
			assert.Equal(t, 0, r.Code)
			assert.Contains(t, r.Stderr, "had already finished")
		})
	}
}

func TestStopWaiter(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	w := e.start(nil, "start", "--wait", "waiter", "--", "true")
	e.waitQueued("waiter")
	r := e.run("stop", "waiter")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "to leave the queue")
	assert.Equal(t, 143, w.wait(t, 10*time.Second).Code)
	assert.Empty(t, e.queue().Queue)
	release()
	holder.wait(t, 10*time.Second)
}

// TestPruneKeepsActiveRuns: prune with concurrent starts never touches an
// active record; --dry-run changes nothing.
func TestPruneKeepsActiveRuns(t *testing.T) {
	e := newEnv(t)
	e.initMax(20)
	for i := range 15 {
		require.Equal(t, 0, e.run("start", fmt.Sprintf("old-%d", i), "--", "true").Code)
	}
	gate, openGate := e.gate("hold")
	var holders []*proc
	for i := range 3 {
		holders = append(holders, e.start(nil, append([]string{"start", fmt.Sprintf("live-%d", i), "--"}, waitCmd(gate)...)...))
		e.activeRun(fmt.Sprintf("live-%d", i))
	}

	before := snapshotTree(t, e.root)
	dry := e.run("prune", "--keep", "5", "--dry-run")
	require.Equal(t, 0, dry.Code, dry.Stderr)
	assert.Contains(t, dry.Stdout, "would remove 10 finished run(s)")
	assert.Equal(t, before, snapshotTree(t, e.root), "--dry-run changed the state root")

	// Prune while starts keep finishing and admitting.
	var wg sync.WaitGroup
	starts := make([]result, 10)
	errs := make([]error, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			starts[i], errs[i] = e.tryRun("start", fmt.Sprintf("new-%d", i), "--", "true")
		}()
	}
	r := e.run("prune", "--keep", "5")
	wg.Wait()
	require.Equal(t, 0, r.Code, r.Stderr)
	for i := range starts {
		require.NoError(t, errs[i])
		assert.Equal(t, 0, starts[i].Code, "a start beside prune: %s", starts[i].Stderr)
	}
	// 15 old runs and up to 10 new ones had finished: it removed at least
	// the 10 old ones beyond the 5 kept (else it proved nothing).
	m := regexp.MustCompile(`^removed (\d+) finished run\(s\)`).FindStringSubmatch(r.Stdout)
	require.NotNil(t, m, "prune's report: %q", r.Stdout)
	removed, _ := strconv.Atoi(m[1])
	assert.GreaterOrEqual(t, removed, 10, "prune removed too little to have tested anything: %s", r.Stdout)
	s := e.status()
	assert.Len(t, s.Active, 3, "every active run survives")
	for _, a := range s.Active {
		assert.Equal(t, "running", a.State)
	}
	openGate()
	for _, h := range holders {
		assert.Equal(t, 0, h.wait(t, 10*time.Second).Code)
	}
	_, done := runIDsOnDisk(t, e.root)
	assert.GreaterOrEqual(t, len(done), 5)
	r = e.run("prune", "--older-than", "1h")
	require.Equal(t, 0, r.Code)
	assert.Contains(t, r.Stdout, "removed 0 finished run(s)")
}

func TestStatusTellsTheTaskStory(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("busy")
	r := e.run("start", "blocked", "--", "true")
	require.Equal(t, 75, r.Code)
	st := e.run("status", "blocked")
	assert.Contains(t, st.Stdout, "Last start refused at ")
	assert.Contains(t, strings.Join(strings.Fields(st.Stdout), " "), "exit 75): not admitted: all slots are busy (1/1 in use)", "wrapped to the width")
	r = e.run("start", "busy", "--", "true")
	require.Equal(t, 76, r.Code)
	st = e.run("status", "busy")
	assert.Regexp(t, `History of [0-9a-f]{8} \(r-`, st.Stdout)
	assert.Contains(t, st.Stdout, "admitted: 0/1 slots in use")
	assert.Contains(t, st.Stdout, "command started: pid ")
	release()
	holder.wait(t, 10*time.Second)
	require.Equal(t, 0, e.run("start", "blocked", "--", "true").Code)
	st = e.run("status", "blocked")
	assert.NotContains(t, st.Stdout, "Last start refused", "a refusal followed by a run is old news")
}

func TestOperateErrors(t *testing.T) {
	e := newEnv(t)
	unknown := "r-20260101T000000.000000000Z-00000000000000ff"
	cases := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"wait", unknown}, 64, "crew: no run " + unknown + " in the state root"},
		{[]string{"wait", "nope"}, 64, `crew: task "nope" has no runs in the state root`},
		{[]string{"wait"}, 64, "crew: give the runs to wait for: RUN or TASK arguments, or --label KEY=VALUE"},
		{[]string{"logs", "nope"}, 64, `crew: task "nope" has no runs`},
		{[]string{"stop", "nope"}, 64, `crew: task "nope" has no runs`},
		{[]string{"stop", "--signal", "BOGUS", "x"}, 64, `crew: unknown signal "BOGUS"`},
		{[]string{"prune"}, 64, "crew: say what to prune: --older-than D, --keep N, or both"},
		{[]string{"prune", "--older-than", "soon"}, 64, `crew: --older-than "soon": not a duration; give a number and a unit, as in --older-than=90s`},
	}
	for _, c := range cases {
		r := e.run(c.args...)
		assert.Equal(t, c.code, r.Code, "%v: %s", c.args, r.Stderr)
		assert.Contains(t, r.Stderr, c.stderr, "%v", c.args)
		assert.Empty(t, r.Stdout)
	}

	// wait --timeout: 75 (124 is a run's own timeout).
	gate, openGate := e.gate("slow")
	p := e.start(nil, append([]string{"start", "slow", "--"}, waitCmd(gate)...)...)
	e.activeRun("slow")
	r := e.run("wait", "--timeout", "200ms", "slow")
	assert.Equal(t, 75, r.Code)
	assert.Contains(t, r.Stderr, "crew: slow: gave up after 200ms: run r-")
	openGate()
	p.wait(t, 10*time.Second)

	// A run that ended interrupted: 125 and the reason.
	victim := e.start([]string{"CREW_FAILPOINT=exited:kill"}, "start", "crashy", "--", "true")
	require.Equal(t, 137, victim.wait(t, 10*time.Second).Code)
	r = e.run("wait", "crashy")
	assert.Equal(t, 125, r.Code)
	assert.Contains(t, r.Stderr, "ended interrupted with no exit status: owner process")
}

func TestCompletion(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 0, e.run("start", "deploy:prod", "--", "true").Code)
	r := e.run("completion", "bash")
	require.Equal(t, 0, r.Code)
	assert.Contains(t, r.Stdout, "bash completion")
	r = e.run("__complete", "wait", "")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stdout, "deploy:prod")
	assert.Regexp(t, `r-\d{8}T`, r.Stdout)
}

// TestWaitReturnsOnceTheSlotIsFree: `crew wait RUN && crew start TASK` must
// not be refused for RUN's own slot. The run's supervisor is held just after
// its final record is durable (failpoint "final-synced"), with its record
// still in the active set and its locks held; in a root with more active runs than
// admission probes one by one, admission counts that run from the active
// index as long as its locks are held. crew wait must not answer before then.
func TestWaitReturnsOnceTheSlotIsFree(t *testing.T) {
	e := newEnv(t)
	e.initMax(16)
	for i := range 9 {
		r := e.run("start", "--detach", fmt.Sprintf("busy-%d", i), "--", "sleep", "600")
		require.Equal(t, 0, r.Code, r.Stderr)
	}
	gate, openGate := e.gate("final-synced")
	r := e.runEnv([]string{"CREW_FAILPOINT=final-synced:wait:" + gate}, "start", "--detach", "again", "--", "true")
	require.Equal(t, 0, r.Code, r.Stderr)
	id := strings.TrimSpace(r.Stdout)
	eventually(t, 10*time.Second, "the run's supervisor to have written the final record", func() bool { return exists(gate + ".reached") })

	waiter := e.start(nil, "wait", id)
	done := make(chan result, 1)
	go func() { done <- waiter.wait(t, 20*time.Second) }()
	select {
	case w := <-done:
		t.Fatalf("crew wait returned (exit %d) while the run still held its slot; a start now says: %s",
			w.Code, e.run("start", "again", "--", "true").Stderr)
	case <-time.After(500 * time.Millisecond):
	}
	openGate()
	w := <-done
	require.Equal(t, 0, w.Code, w.Stderr)
	next := e.run("start", "again", "--", "true")
	assert.Equal(t, 0, next.Code, "a start right after crew wait: %s", next.Stderr)
}

// TestTaskFoundWhileItsRecordMoves: a finishing run is entered in the
// index of finished runs before its record moves from runs/active to
// runs/done, and readers list the active set before they read the index,
// so a run is always found in one or the other. The supervisor is held
// between the two (failpoint "indexed"): crew wait TASK must find the run
// and wait for its slot, not say the task has no runs (exit 64, which
// crew wait said when the record moved before its entry was written),
// and crew history must list it.
func TestTaskFoundWhileItsRecordMoves(t *testing.T) {
	e := newEnv(t)
	gate, openGate := e.gate("indexed")
	r := e.runEnv([]string{"CREW_FAILPOINT=indexed:wait:" + gate}, "start", "--detach", "moving", "--", "true")
	require.Equal(t, 0, r.Code, r.Stderr)
	id := strings.TrimSpace(r.Stdout)
	eventually(t, 10*time.Second, "the run's supervisor to have indexed the final record", func() bool { return exists(gate + ".reached") })

	h := e.history()
	require.NotEmpty(t, h.Runs, "crew history while the record moves")
	assert.Equal(t, id, h.Runs[0].RunID, "crew history lists the run while its record moves")

	waiter := e.start(nil, "wait", "moving")
	done := make(chan result, 1)
	go func() { done <- waiter.wait(t, 20*time.Second) }()
	select {
	case w := <-done:
		t.Fatalf("crew wait moving returned (exit %d) while the run still held its slot: %s", w.Code, w.Stderr)
	case <-time.After(500 * time.Millisecond):
	}
	openGate()
	w := <-done
	assert.Equal(t, 0, w.Code, "crew wait moving: %s", w.Stderr)
	assert.Equal(t, id, e.history().Runs[0].RunID)
}
