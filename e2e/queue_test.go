package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type queueJSON struct {
	Queue []struct {
		Position   int       `json:"position"`
		Task       string    `json:"task"`
		RunID      string    `json:"runId"`
		Since      time.Time `json:"since"`
		Pool       string    `json:"pool"`
		WaitingFor string    `json:"waitingFor"`
	} `json:"queue"`
	Pools []struct {
		Name              string `json:"name"`
		MaximumInProgress int    `json:"maximumInProgress"`
		InUse             int    `json:"inUse"`
	} `json:"pools"`
}

func (e *env) queue() queueJSON {
	e.t.Helper()
	r := e.run("status", "--json")
	require.Equal(e.t, 0, r.Code, r.Stderr)
	var q queueJSON
	require.NoError(e.t, json.Unmarshal([]byte(r.Stdout), &q))
	return q
}

// waitQueued waits until task has a ticket in the queue.
func (e *env) waitQueued(task string) {
	e.t.Helper()
	eventually(e.t, 10*time.Second, task+" to be in the queue", func() bool {
		for _, q := range e.queue().Queue {
			if q.Task == task {
				return true
			}
		}
		return false
	})
}

// holdSlot starts a run that holds a slot until the returned function is
// called.
func (e *env) holdSlot(task string, extra ...string) (release func(), p *proc) {
	gate, open := e.gate("hold-" + strings.ReplaceAll(task, "/", "_"))
	args := append(append([]string{"start"}, extra...), append([]string{task, "--"}, waitCmd(gate)...)...)
	p = e.start(nil, args...)
	e.activeRun(task)
	return open, p
}

// TestQueueIsFIFO: waiters that provably arrived in a known order (each
// started only once the previous one's ticket is visible) are admitted in
// exactly that order.
func TestQueueIsFIFO(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	order := filepath.Join(e.dir, "order")
	const n = 6
	var waiters []*proc
	for i := range n {
		task := fmt.Sprintf("w%d", i)
		waiters = append(waiters, e.start(nil, "start", "--wait", task, "--", "sh", "-c", `echo "$1" >> "$2"`, "x", task, order))
		e.waitQueued(task)
	}
	q := e.queue().Queue
	require.Len(t, q, n)
	// A waiting start's id is already its run id; status shows its place.
	var one map[string]any
	r := e.run("status", "--json", q[2].RunID)
	require.Equal(t, 0, r.Code, r.Stderr)
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &one))
	assert.Equal(t, "queued", one["state"])
	assert.Equal(t, float64(3), one["position"])
	assert.Equal(t, "w2", one["task"])
	assert.Contains(t, e.run("status", q[2].RunID).Stdout, "queued, 3rd in line, waiting for a slot")
	for i, item := range q {
		assert.Equal(t, i+1, item.Position)
		assert.Equal(t, fmt.Sprintf("w%d", i), item.Task)
		assert.Equal(t, "slot", item.WaitingFor)
		assert.NotEmpty(t, item.RunID)
	}
	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	for _, w := range waiters {
		r := w.wait(t, 30*time.Second)
		require.Equal(t, 0, r.Code, r.Stderr)
		assert.Regexp(t, `(?m)^crew: w\d+: waiting for a slot: `, r.Stderr, "the line names the task")
		assert.Regexp(t, `(?m)^crew: w\d+: admitted as run [0-9a-f]{8} after waiting `, r.Stderr)
	}
	data, err := os.ReadFile(order)
	require.NoError(t, err)
	assert.Equal(t, "w0\nw1\nw2\nw3\nw4\nw5\n", string(data))
	assert.Empty(t, e.queue().Queue)
}

// TestQueueNeverOverAdmits: 64 waiting starts at a cap of 4; the commands'
// own observer never sees more than 4 at once, and all 64 run.
func TestQueueNeverOverAdmits(t *testing.T) { queueNeverOverAdmits(t) }

// queueNeverOverAdmits is one round of TestQueueNeverOverAdmits (TestSoak
// runs it again and again).
func queueNeverOverAdmits(t *testing.T) {
	e := newEnv(t)
	e.initMax(4)
	obs := filepath.Join(e.dir, "observer")
	const n = 64
	var wg sync.WaitGroup
	results := make([]result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.tryRun(append([]string{"start", "--wait", fmt.Sprintf("job-%d", i), "--"}, observerCmd(obs, "0.05")...)...)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	for i, r := range results {
		assert.Equal(t, 0, r.Code, "job-%d: %s", i, r.Stderr)
	}
	maxSeen, started := maxConcurrency(t, obs)
	t.Logf("observer saw at most %d at once; %d started", maxSeen, started)
	assert.LessOrEqual(t, maxSeen, 4)
	assert.Equal(t, n, started, "every waiter ran")
	s := e.status()
	assert.Zero(t, s.SlotsInUse)
	assert.Empty(t, e.queue().Queue)
	entries, _ := os.ReadDir(filepath.Join(e.root, "queue"))
	assert.Empty(t, entries, "no ticket files left")
}

// TestKilledWaiterDoesNotBlock: a waiter killed with SIGKILL stops holding
// its place at once; the next one gets the slot on the next handoff.
func TestKilledWaiterDoesNotBlock(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	doomed := e.start(nil, "start", "--wait", "doomed", "--", "true")
	e.waitQueued("doomed")
	next := e.start(nil, "start", "--wait", "next", "--", "true")
	e.waitQueued("next")

	require.NoError(t, doomed.cmd.Process.Signal(syscall.SIGKILL))
	doomed.wait(t, 10*time.Second)
	q := e.queue().Queue
	require.Len(t, q, 1, "a dead waiter's ticket no longer counts")
	assert.Equal(t, "next", q[0].Task)
	assert.Equal(t, 1, q[0].Position)

	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	r := next.wait(t, 10*time.Second)
	assert.Equal(t, 0, r.Code, r.Stderr)
	s := e.status("next")
	require.Len(t, s.Finished, 1)
	assert.Equal(t, "succeeded", s.Finished[0].State)
	// The next admission removed the dead ticket's files.
	entries, _ := os.ReadDir(filepath.Join(e.root, "queue"))
	assert.Empty(t, entries)
}

// TestInterruptedWaiterLeavesNoTicket: SIGINT or SIGTERM while waiting
// removes the ticket and exits 130/143 without running anything.
func TestInterruptedWaiterLeavesNoTicket(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(signalName(sig), func(t *testing.T) {
			e := newEnv(t)
			e.initMax(1)
			release, holder := e.holdSlot("holder")
			marker := filepath.Join(e.dir, "ran")
			w := e.start(nil, "start", "--wait", "waiter", "--", "touch", marker)
			e.waitQueued("waiter")
			require.NoError(t, w.cmd.Process.Signal(sig))
			r := w.wait(t, 10*time.Second)
			assert.Equal(t, 128+int(sig), r.Code)
			assert.Contains(t, r.Stderr, "received "+signalName(sig)+" while waiting for admission; nothing was started")
			entries, err := os.ReadDir(filepath.Join(e.root, "queue"))
			require.NoError(t, err)
			assert.Empty(t, entries, "the ticket, its lock and its bell are gone")
			release()
			holder.wait(t, 10*time.Second)
			assert.NoFileExists(t, marker)
			assert.Empty(t, e.status("waiter").Finished)
		})
	}
}

// TestWaitTimeout: --wait=D gives up after D with 75 (slots) or 76 (task).
func TestWaitTimeout(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("busy")
	defer func() { release(); holder.wait(t, 10*time.Second) }()

	begin := time.Now()
	r := e.run("start", "--wait=1s", "other", "--", "true")
	took := time.Since(begin)
	assert.Equal(t, 75, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: other: not admitted: gave up after waiting 1s in the queue; all slots are busy (1/1 in use)")
	assert.GreaterOrEqual(t, took, time.Second)
	t.Logf("--wait=1s on a busy machine took %s", took)

	require.Equal(t, 0, e.run("init", "--max", "2").Code)
	r = e.run("start", "--wait=1s", "busy", "--", "true")
	assert.Equal(t, 76, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, `crew: busy: not admitted: gave up after waiting 1s in the queue; task "busy" is already running as r-`)
	assert.Empty(t, e.queue().Queue, "timed-out tickets are removed")
}

// TestQueueHasNoHeadOfLineBlocking: a waiter whose task is busy does not
// hold up a younger waiter of another task; two waiters of one task go
// oldest first, the younger after the older has finished.
func TestQueueHasNoHeadOfLineBlocking(t *testing.T) {
	e := newEnv(t)
	e.initMax(3)
	release, holder := e.holdSlot("build")
	order := filepath.Join(e.dir, "order")
	gate, openGate := e.gate("build-waiters")
	olderGate := filepath.Join(e.dir, "older-woken")
	older := e.start([]string{"CREW_FAILPOINT=queue-woken:wait:" + olderGate}, "start", "--wait", "build", "--", "sh", "-c", `echo older >> "$1"; while [ ! -e "$2" ]; do sleep 0.01; done`, "x", order, gate)
	e.waitQueued("build")
	younger := e.start(nil, "start", "--wait", "build", "--", "sh", "-c", `echo younger >> "$1"`, "x", order)
	eventually(t, 10*time.Second, "two build tickets", func() bool { return len(e.queue().Queue) == 2 })
	for _, q := range e.queue().Queue {
		assert.Equal(t, "task", q.WaitingFor)
	}

	// A slot is free: another task's waiter goes straight past them.
	r := e.run("start", "--wait=10s", "lint", "--", "true")
	require.Equal(t, 0, r.Code, r.Stderr)

	// Hold the older waiter right after it is woken, before it can claim
	// the task: the younger must still not go first.
	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	eventually(t, 10*time.Second, "the older waiter to be woken", func() bool { return exists(olderGate + ".reached") })
	time.Sleep(500 * time.Millisecond) // a wrongly woken younger waiter runs within milliseconds
	data, _ := os.ReadFile(order)
	assert.Empty(t, string(data), "the younger waiter of the task went first")
	require.NoError(t, os.WriteFile(olderGate, nil, 0o600))
	eventually(t, 10*time.Second, "the older build waiter to run", func() bool {
		data, _ := os.ReadFile(order)
		return string(data) == "older\n"
	})
	q := e.queue().Queue
	require.Len(t, q, 1, "the younger waits for the older's run to end")
	assert.Equal(t, "task", q[0].WaitingFor)
	openGate()
	require.Equal(t, 0, older.wait(t, 10*time.Second).Code)
	require.Equal(t, 0, younger.wait(t, 10*time.Second).Code)
	data, _ = os.ReadFile(order)
	assert.Equal(t, "older\nyounger\n", string(data))
}

// TestNewcomerDoesNotJumpTheQueue: a start without --wait does not take a
// slot that waiting starts are owed.
func TestNewcomerDoesNotJumpTheQueue(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	gate, openGate := e.gate("w")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })
	release, holder := e.holdSlot("holder")
	w := e.start(nil, append([]string{"start", "--wait", "waiter", "--"}, waitCmd(gate)...)...)
	e.waitQueued("waiter")
	release()
	holder.wait(t, 10*time.Second)
	e.activeRun("waiter")
	r := e.run("start", "latecomer", "--", "true")
	assert.Equal(t, 75, r.Code)
	openGate()
	require.Equal(t, 0, w.wait(t, 10*time.Second).Code)
}

// TestPools: a pool cap of 1 inside a global cap of 4 admits one deploy at
// a time while other runs use the rest.
func TestPools(t *testing.T) {
	e := newEnv(t)
	r := e.run("init", "--max", "4", "--pool", "deploy=1", "--pool", "test=6")
	require.Equal(t, 0, r.Code, r.Stderr)
	obsDeploy := filepath.Join(e.dir, "deploy")
	obsAll := filepath.Join(e.dir, "all")
	cmd := func(tag string) []string {
		return []string{"sh", "-c", `echo "start $(date +%s%N) $CREW_RUN_ID" >> "$1"; echo "start $(date +%s%N) $CREW_RUN_ID" >> "$2"; sleep 0.3; echo "end $(date +%s%N) $CREW_RUN_ID" >> "$1"; echo "end $(date +%s%N) $CREW_RUN_ID" >> "$2"`, tag, obsDeploy, obsAll}
	}
	other := func() []string {
		return []string{"sh", "-c", `echo "start $(date +%s%N) $CREW_RUN_ID" >> "$1"; sleep 0.3; echo "end $(date +%s%N) $CREW_RUN_ID" >> "$1"`, "other", obsAll}
	}
	var wg sync.WaitGroup
	codes := make([]int, 6)
	errs := make([]error, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r result
			if i < 3 {
				r, errs[i] = e.tryRun(append([]string{"start", "--wait", "--pool", "deploy", fmt.Sprintf("deploy:%d", i), "--"}, cmd("d")...)...)
			} else {
				r, errs[i] = e.tryRun(append([]string{"start", "--wait", fmt.Sprintf("test-%d", i), "--"}, other()...)...)
			}
			codes[i] = r.Code
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, []int{0, 0, 0, 0, 0, 0}, codes)
	deployMax, deploys := maxConcurrency(t, obsDeploy)
	allMax, all := maxConcurrency(t, obsAll)
	assert.Equal(t, 3, deploys)
	assert.Equal(t, 6, all)
	assert.Equal(t, 1, deployMax, "one deploy at a time")
	assert.LessOrEqual(t, allMax, 4)
	assert.GreaterOrEqual(t, allMax, 2, "tests ran beside the deploy")

	// Pool usage and a full pool's refusal.
	release, holder := e.holdSlot("deploy:x", "--pool", "deploy")
	q := e.queue()
	require.Len(t, q.Pools, 2)
	assert.Equal(t, "deploy", q.Pools[0].Name)
	assert.Equal(t, 1, q.Pools[0].InUse)
	assert.Equal(t, 1, q.Pools[0].MaximumInProgress)
	r = e.run("start", "--pool", "deploy", "deploy:y", "--", "true")
	assert.Equal(t, 75, r.Code)
	assert.Contains(t, r.Stderr, `crew: deploy:y: not admitted: pool "deploy" is full (1/1 in use; all slots 1/4)`)
	w := e.start(nil, "start", "--wait", "--pool", "deploy", "deploy:z", "--", "true")
	e.waitQueued("deploy:z")
	for _, item := range e.queue().Queue {
		assert.Equal(t, "pool", item.WaitingFor)
		assert.Equal(t, "deploy", item.Pool)
	}
	release()
	holder.wait(t, 10*time.Second)
	assert.Equal(t, 0, w.wait(t, 10*time.Second).Code)
}

func TestUnknownPool(t *testing.T) {
	e := newEnv(t)
	r := e.run("start", "--pool", "deploy", "x", "--", "true")
	assert.Equal(t, 64, r.Code)
	assert.Contains(t, r.Stderr, `crew: unknown pool "deploy": no pools are configured (add one with `+"`crew init --pool deploy=N`)")
	require.Equal(t, 0, e.run("init", "--pool", "test=2", "--pool", "build=1").Code)
	r = e.run("start", "--wait", "--pool", "deploy", "x", "--", "true")
	assert.Equal(t, 64, r.Code)
	assert.Contains(t, r.Stderr, `crew: unknown pool "deploy"; configured pools: build, test`)
	r = e.run("init", "--pool", "nonsense")
	assert.Equal(t, 64, r.Code)
	assert.Contains(t, r.Stderr, `crew: --pool wants NAME=N (such as deploy=1), not "nonsense"`)
	r = e.run("start", "--wait", "--force", "x", "--", "true")
	assert.Equal(t, 64, r.Code)
	assert.Contains(t, r.Stderr, "--wait and --force do not go together")
	r = e.run("start", "--wait=soon", "x", "--", "true")
	assert.Equal(t, 64, r.Code)
	assert.Contains(t, r.Stderr, `crew: --wait "soon": not a duration; give a number and a unit, as in --wait=90s`)
}

// TestRecoverSweepsDeadTickets: a waiter killed with SIGKILL leaves its
// ticket; it never counts, and crew recover removes it.
func TestRecoverSweepsDeadTickets(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	doomed := e.start(nil, "start", "--wait", "doomed", "--", "true")
	e.waitQueued("doomed")
	require.NoError(t, doomed.cmd.Process.Signal(syscall.SIGKILL))
	doomed.wait(t, 10*time.Second)
	assert.Empty(t, e.queue().Queue)
	rep, r := e.recover()
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, 1, rep.changes(), "%+v", rep)
	entries, _ := os.ReadDir(filepath.Join(e.root, "queue"))
	assert.Empty(t, entries)
	again, _ := e.recover()
	assert.Zero(t, again.changes())
	release()
	holder.wait(t, 10*time.Second)
}

// parkedWaiter lines up a waiter of task behind a held slot (cap 1) and
// returns it with its ticket's id, and free, which ends the holder and
// waits until the waiter, woken, is held at the queue-woken failpoint
// (until let, the returned function, is called): a slot is then free and
// the waiter still in line.
func (e *env) parkedWaiter(task string) (w *proc, id string, free func(), let func()) {
	e.t.Helper()
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	woken := filepath.Join(e.dir, "waiter-woken")
	e.t.Cleanup(func() { _ = os.WriteFile(woken, nil, 0o600) })
	w = e.start([]string{"CREW_FAILPOINT=queue-woken:wait:" + woken}, "start", "--wait", task, "--", "true")
	e.waitQueued(task)
	id = e.queue().Queue[0].RunID
	free = func() {
		e.t.Helper()
		release()
		require.Equal(e.t, 0, holder.wait(e.t, 10*time.Second).Code)
		eventually(e.t, 10*time.Second, "the waiter to be woken", func() bool { return exists(woken + ".reached") })
	}
	return w, id, free, func() { require.NoError(e.t, os.WriteFile(woken, nil, 0o600)) }
}

// Issue 23, item 12: a waiting start whose ticket could not be read was
// left out of the line: a plain start took the free slot ahead of it, and
// nothing said why. The ticket keeps its place while its waiter lives,
// and crew says what is wrong with it.
func TestUnreadableTicketKeepsItsPlace(t *testing.T) {
	e := newEnv(t)
	w, id, free, let := e.parkedWaiter("waiter")
	ticket := filepath.Join(e.root, "queue", id+".json")
	require.NoError(t, os.WriteFile(ticket, []byte("not a ticket"), 0o600))

	var s struct {
		Queue []struct {
			RunID      string `json:"runId"`
			Task       string `json:"task"`
			Unreadable bool   `json:"unreadable"`
		} `json:"queue"`
		Problems []struct {
			Path       string `json:"path"`
			Error      string `json:"error"`
			OwnerAlive bool   `json:"ownerAlive"`
		} `json:"problems"`
	}
	r := e.run("status", "--json")
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &s), r.Stdout)
	require.Len(t, s.Queue, 1, "the waiter keeps its place")
	assert.Equal(t, id, s.Queue[0].RunID)
	assert.True(t, s.Queue[0].Unreadable)
	require.Len(t, s.Problems, 1)
	assert.Equal(t, ticket, s.Problems[0].Path)
	assert.Contains(t, s.Problems[0].Error, "its waiter lives, so it keeps its place in line")
	assert.True(t, s.Problems[0].OwnerAlive)
	assert.Contains(t, e.run("status").Stdout, "(unreadable ticket)")

	free()
	r = e.run("start", "latecomer", "--", "true")
	assert.Equal(t, 75, r.Code, "a newcomer went ahead of the waiter: %s", r.Stderr)
	assert.Contains(t, r.Stderr, "crew: latecomer: not admitted: 1 waiting start(s) are ahead in the queue for the free slot(s) (0/1 in use)")
	assert.Contains(t, r.Stderr, "crew: latecomer: warning: ticket "+ticket+": not a JSON queue ticket")
	assert.Contains(t, r.Stderr, ": its waiter lives, so it keeps its place in line (it goes when its waiter does)")

	for _, f := range e.status().Finished {
		assert.NotEqual(t, "latecomer", f.Task, "a start went past the waiter")
	}
	let()
	require.Equal(t, 0, w.wait(t, 10*time.Second).Code, "the waiter is admitted in its turn")
	assert.Equal(t, "succeeded", e.finishedRun("waiter").State)
	assert.Equal(t, id, e.finishedRun("waiter").RunID, "under its ticket's id")
	assert.Empty(t, e.queue().Queue)
	assert.NoFileExists(t, ticket)
}

// Issue 23, item 12: a queue that could not be listed looked empty, and a
// plain start took the free slot ahead of the waiters. It is refused
// (exit 125) with why, the path and the fix; so is a --wait start, which
// cannot take a place in a line it cannot see; the waiter keeps its own.
func TestUnlistableQueueAdmitsNobodyPastIt(t *testing.T) {
	e := newEnv(t)
	w, _, free, let := e.parkedWaiter("waiter")
	free()
	queueDir := filepath.Join(e.root, "queue")
	broken := []string{"CREW_FAILPOINT=queue-list:error:EIO"}
	for _, args := range [][]string{{"start", "latecomer", "--", "true"}, {"start", "--wait", "latecomer", "--", "true"}} {
		r := e.runEnv(broken, args...)
		assert.Equal(t, 125, r.Code, "crew %v: %s", args, r.Stderr)
		assert.Contains(t, r.Stderr, "crew: latecomer: not admitted: crew cannot tell whether waiting starts are owed the free slots, so nothing was recorded: "+
			"cannot read the queue of waiting starts (list the queue in "+queueDir+": input/output error). "+
			"Fix: make "+queueDir+" a directory crew can list")
	}
	var s struct {
		Queue    []json.RawMessage `json:"queue"`
		Problems []struct {
			Path  string `json:"path"`
			Error string `json:"error"`
		} `json:"problems"`
	}
	r := e.runEnv(broken, "status", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &s), r.Stdout)
	require.Len(t, s.Problems, 1, "status says the queue cannot be read")
	assert.Equal(t, queueDir, s.Problems[0].Path)
	assert.Contains(t, s.Problems[0].Error, "cannot read the queue of waiting starts")

	let()
	require.Equal(t, 0, w.wait(t, 10*time.Second).Code)
	assert.Equal(t, "succeeded", e.finishedRun("waiter").State)
	for _, f := range e.status().Finished {
		assert.NotEqual(t, "latecomer", f.Task, "a start went past the queue")
	}
}
