package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestForcedAdmissionRace holds the first crew inside the admission
// critical section, after it has re-read the active runs, and only then
// lets the second one reach the lock: with a cap of one, exactly one may be
// admitted.
func TestForcedAdmissionRace(t *testing.T) {
	admitted := forcedRace(t, "")
	assert.Equal(t, 1, admitted, "with the admission lock, exactly one of two racing starts is admitted")
}

// TestForcedAdmissionRaceCatchesMissingLock proves the race test above can
// fail: with the admission lock compiled out (failpoint admission-lock:skip)
// the same interleaving admits both.
func TestForcedAdmissionRaceCatchesMissingLock(t *testing.T) {
	admitted := forcedRace(t, "admission-lock:skip")
	assert.Equal(t, 2, admitted, "without the admission lock the forced interleaving over-admits")
}

// forcedRace returns how many of two racing starts were admitted.
func forcedRace(t *testing.T, sabotage string) int {
	e := newEnv(t)
	e.initMax(1)
	gate, openGate := e.gate("first-inside")
	contended, _ := e.gate("second-waits")
	require.NoError(t, os.WriteFile(contended, nil, 0o600)) // a wait that returns at once: just a marker

	fp := func(rule string) []string {
		rules := []string{rule}
		if sabotage != "" {
			rules = append(rules, sabotage)
		}
		return []string{"CREW_FAILPOINT=" + strings.Join(rules, ",")}
	}
	// The first one's command runs until the second has ended: a first
	// run that ended before the second was let in would free its slot, and
	// under load the second can take that long to be scheduled.
	hold, release := e.gate("first-runs")
	first := e.start(fp("owner-locked:wait:"+gate), append([]string{"start", "--lock-timeout", "20s", "first", "--"}, waitCmd(hold)...)...)
	eventually(t, 10*time.Second, "the first start to be inside the critical section", func() bool { return exists(gate + ".reached") })

	second := e.start(fp("admission-contended:wait:"+contended), "start", "--lock-timeout", "20s", "second", "--", "true")
	if sabotage == "" {
		// The second one reaches the lock and finds it held.
		eventually(t, 10*time.Second, "the second start to wait for the admission lock", func() bool { return exists(contended + ".reached") })
	} else {
		// Without a lock, the second one runs straight through.
		second.wait(t, 10*time.Second)
	}
	openGate()
	r2 := second.wait(t, 10*time.Second)
	release()
	r1 := first.wait(t, 10*time.Second)
	admitted := 0
	for _, r := range []result{r1, r2} {
		switch r.Code {
		case 0:
			admitted++
		case 75:
			assert.Contains(t, r.Stderr, "not admitted: all slots are busy (1/1 in use)")
		default:
			t.Fatalf("unexpected exit %d: %s", r.Code, r.Stderr)
		}
	}
	if sabotage == "" {
		assert.Equal(t, 0, r1.Code, "the first one was inside first: %s", r1.Stderr)
		assert.Equal(t, 75, r2.Code, r2.Stderr)
	}
	return admitted
}

// observerCmd is a command that records its own start and end (in
// nanoseconds) in an observer file, independent of crew's records.
func observerCmd(file string, sleep string) []string {
	return []string{"sh", "-c", `echo "start $(date +%s%N) $CREW_RUN_ID" >> "$1"; sleep "$2"; echo "end $(date +%s%N) $CREW_RUN_ID" >> "$1"`, "observer", file, sleep}
}

// maxConcurrency reads an observer file and returns the most commands seen
// running at once, and how many started.
func maxConcurrency(t *testing.T, file string) (maxSeen, started int) {
	t.Helper()
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return 0, 0
	}
	require.NoError(t, err)
	defer f.Close()
	type event struct {
		at    int64
		delta int
	}
	var events []event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		require.Len(t, fields, 3, "observer line %q", sc.Text())
		at, err := strconv.ParseInt(fields[1], 10, 64)
		require.NoError(t, err)
		d := 1
		if fields[0] == "end" {
			d = -1
		} else {
			started++
		}
		events = append(events, event{at, d})
	}
	// Ends sort before starts at the same instant: the observer's clock has
	// a finite resolution, and a handoff within it is not an overlap.
	sort.Slice(events, func(i, j int) bool {
		if events[i].at != events[j].at {
			return events[i].at < events[j].at
		}
		return events[i].delta < events[j].delta
	})
	cur := 0
	for _, ev := range events {
		cur += ev.delta
		maxSeen = max(maxSeen, cur)
	}
	return maxSeen, started
}

// TestStressNeverOverAdmits fires 100 concurrent starts at a cap of 3. The
// commands' own start/end records never show more than 3 at once, every
// refusal is exit 75, and every admitted run's command ran.
func TestStressNeverOverAdmits(t *testing.T) { stressNeverOverAdmits(t) }

// stressNeverOverAdmits is one round of TestStressNeverOverAdmits (TestSoak
// runs it again and again).
func stressNeverOverAdmits(t *testing.T) {
	e := newEnv(t)
	e.initMax(3)
	obs := filepath.Join(e.dir, "observer")
	const n = 100
	var wg sync.WaitGroup
	results := make([]result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.tryRun(append([]string{"start", "--lock-timeout", "60s", fmt.Sprintf("job-%d", i), "--"}, observerCmd(obs, "0.05")...)...)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	admitted, refused := 0, 0
	for _, r := range results {
		switch r.Code {
		case 0:
			admitted++
		case 75:
			refused++
			assert.Contains(t, r.Stderr, "not admitted: all slots are busy (3/3 in use)")
		default:
			t.Errorf("unexpected exit %d: %s", r.Code, r.Stderr)
		}
	}
	maxSeen, started := maxConcurrency(t, obs)
	t.Logf("admitted %d, refused %d, observer saw at most %d at once", admitted, refused, maxSeen)
	assert.LessOrEqual(t, maxSeen, 3, "over-admission seen by the commands themselves")
	assert.Equal(t, admitted, started, "every admitted run's command ran, and only those")
	assert.Positive(t, admitted)
	assert.Positive(t, refused, "no start was refused, so the cap was never full and the check above proved nothing")
	s := e.status()
	assert.Equal(t, 0, s.SlotsInUse)
	assert.Empty(t, s.Active)
}

// TestSelfHealingAfterSIGKILL kills a running run's supervisor and
// command; the very next start is admitted, with no recover and no wait.
func TestSelfHealingAfterSIGKILL(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	gate, _ := e.gate("never")
	victim := e.start(nil, append([]string{"start", "victim", "--"}, waitCmd(gate)...)...)
	run := e.activeRun("victim")
	e.killRunAtCleanup(run)
	require.Equal(t, victim.cmd.Process.Pid, run.SupervisorPID, "the supervisor is the crew start the test ran")
	task, group := e.proveRunTask(run), e.proveRunGroup(run)

	r := e.run("start", "other", "--", "true")
	require.Equal(t, 75, r.Code, "the slot is held while the victim lives: %s", r.Stderr)

	require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
	require.NoError(t, group.signal(syscall.SIGKILL))
	victim.wait(t, 10*time.Second)
	eventually(t, 10*time.Second, "the command to be reaped", func() bool { return !task.alive() })

	r = e.run("start", "other", "--", "true")
	require.Equal(t, 0, r.Code, "the next start is admitted at once: %s", r.Stderr)

	rec := e.runRecord(run.RunID)
	assert.Equal(t, "interrupted", rec.State)
	assert.Contains(t, rec.Reason, fmt.Sprintf("owner process %d", run.SupervisorPID))
	assert.Contains(t, rec.Reason, "exited without finalizing the run")
	assert.Contains(t, rec.Reason, "exit status unknown")
	assert.Nil(t, rec.ExitCode)
}

// TestSupervisorKilledCommandKeepsSlot kills only the supervisor: the
// command inherited the owner lock, so the slot stays held until the
// command exits, and then frees itself.
func TestSupervisorKilledCommandKeepsSlot(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	gate, openGate := e.gate("release")
	victim := e.start(nil, append([]string{"start", "victim", "--"}, waitCmd(gate)...)...)
	run := e.activeRun("victim")
	e.killRunAtCleanup(run)
	require.Equal(t, victim.cmd.Process.Pid, run.SupervisorPID, "the supervisor is the crew start the test ran")
	task := e.proveRunTask(run)

	require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
	victim.wait(t, 10*time.Second)
	require.True(t, task.alive(), "the command outlives its supervisor")

	r := e.run("start", "other", "--", "true")
	require.Equal(t, 75, r.Code, "an orphaned command still holds its slot: %s", r.Stderr)
	s := e.status()
	require.Len(t, s.Active, 1)
	assert.True(t, s.Active[0].Orphaned, "status flags the orphan")
	assert.False(t, s.Active[0].SupervisorAlive)
	assert.True(t, s.Active[0].OwnerAlive)

	openGate()
	eventually(t, 10*time.Second, "the command to exit", func() bool { return !task.alive() })
	eventually(t, 10*time.Second, "the slot to free itself", func() bool { return e.status().SlotsInUse == 0 })
	r = e.run("start", "other", "--", "true")
	require.Equal(t, 0, r.Code, r.Stderr)
}

// TestTaskNamesAreIndependent: names that a lossy slug would merge are
// different tasks, and none of them touches the admission lock's files.
func TestTaskNamesAreIndependent(t *testing.T) {
	e := newEnv(t)
	e.initMax(10)
	lockPath := filepath.Join(e.root, ".locks", "dispatch-admission.holder")
	gate, openGate := e.gate("release")
	names := []string{"dispatch:admission", "dispatch-admission", "Dispatch Admission", "a/b", "a_b", "../../.locks/dispatch-admission.holder"}
	var procs []*proc
	for _, name := range names {
		procs = append(procs, e.start(nil, append([]string{"start", name, "--"}, waitCmd(gate)...)...))
		e.activeRun(name)
	}
	before, err := os.Stat(lockPath)
	require.NoError(t, err)

	s := e.status()
	assert.Len(t, s.Active, len(names))
	for _, name := range names {
		r := e.run("start", name, "--", "true")
		assert.Equal(t, 76, r.Code, "second run of %q: %s", name, r.Stderr)
		assert.Contains(t, r.Stderr, fmt.Sprintf("not admitted: task %q is already running as r-", name))
	}
	openGate()
	for _, p := range procs {
		assert.Equal(t, 0, p.wait(t, 10*time.Second).Code)
	}
	after, err := os.Stat(lockPath)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "the admission holder note was never replaced")
	assert.Equal(t, int64(256), after.Size(), "no task wrote into the admission holder note")
}

// TestForceAdmitsPastTheCap records that it did.
func TestForceAdmitsPastTheCap(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	gate, openGate := e.gate("release")
	holder := e.start(nil, append([]string{"start", "holder", "--"}, waitCmd(gate)...)...)
	e.activeRun("holder")

	r := e.run("start", "--force", "urgent", "--", "sh", "-c", "echo forced")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "forced\n", r.Stdout)
	s := e.status()
	require.NotEmpty(t, s.Finished)
	assert.Equal(t, "urgent", s.Finished[0].Task)
	assert.True(t, s.Finished[0].Forced)

	r = e.run("start", "--force", "holder", "--", "true")
	assert.Equal(t, 76, r.Code, "--force never admits a second run of the same task")
	openGate()
	holder.wait(t, 10*time.Second)
}
