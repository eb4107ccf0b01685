package dispatch_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// waiter is a waiting Admit running in the background.
type waiter struct {
	task string
	done chan struct{}
	res  *dispatch.Reservation
	err  error

	mu       sync.Mutex
	progress []vocab.WaitProgress
}

// startWaiter calls Admit with Wait for task in the background and returns
// once its ticket is in the queue and it reported its place. The wait is cancelled when the test ends.
func startWaiter(t *testing.T, d *dispatch.Dispatcher, task, pool string, timeout time.Duration) *waiter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &waiter{task: task, done: make(chan struct{})}
	req := admitReq(task)
	req.Pool = pool
	req.Wait = true
	req.WaitTimeout = timeout
	req.OnWait = func(p vocab.WaitProgress) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.progress = append(w.progress, p)
	}
	before := queueLen(t, d)
	go func() {
		defer close(w.done)
		w.res, w.err = d.Admit(ctx, req)
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
		if w.res != nil {
			releaseAll(w.res)
		}
	})
	waitFor(t, "waiter "+task+" to join the queue", 10*time.Second, func() bool {
		select {
		case <-w.done:
			return true // admitted (or failed) at once
		default:
		}
		w.mu.Lock()
		reported := len(w.progress) > 0
		w.mu.Unlock()
		return reported && queueLen(t, d) > before
	})
	return w
}

func (w *waiter) finished() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

func (w *waiter) await(t *testing.T) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("waiter %s was not admitted", w.task)
	}
}

func (w *waiter) lastProgress() vocab.WaitProgress {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.progress) == 0 {
		return vocab.WaitProgress{}
	}
	return w.progress[len(w.progress)-1]
}

func queueLen(t *testing.T, d *dispatch.Dispatcher) int {
	t.Helper()
	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	return len(snap.Queue)
}

func queueFiles(t *testing.T, d *dispatch.Dispatcher) []string {
	t.Helper()
	return dirNames(t, lay(d).queueDir())
}

// Slots go to waiters in arrival order; a newcomer without --wait does not
// take a slot that a waiter is owed.
func TestQueueIsFIFOAndNewcomersDoNotJump(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	holder := admit(t, d, "holder")

	w1 := startWaiter(t, d, "first", "", 0)
	w2 := startWaiter(t, d, "second", "", 0)
	assert.False(t, w1.finished())
	assert.False(t, w2.finished())

	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	require.Len(t, snap.Queue, 2)
	assert.Equal(t, 1, snap.Queue[0].Position)
	assert.Equal(t, "first", snap.Queue[0].Task)
	assert.Equal(t, admission.WaitSlot, snap.Queue[0].WaitingFor)
	assert.Equal(t, 2, snap.Queue[1].Position)
	assert.Equal(t, "second", snap.Queue[1].Task)
	assert.Less(t, string(snap.Queue[0].RunID), string(snap.Queue[1].RunID))
	assert.Equal(t, 1, w1.lastProgress().Position)
	assert.Equal(t, admission.WaitSlot, w1.lastProgress().Reason)
	assert.Equal(t, 2, w2.lastProgress().Position)

	// The slot frees (the holder finished) but nobody rang yet: a
	// newcomer is refused because waiters are owed the slot.
	finishQuietly(t, holder)
	_, err = d.Admit(context.Background(), admitReq("newcomer"))
	var refused *vocab.RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, vocab.SlotsBusy, refused.Kind)
	assert.True(t, refused.QueueAhead)
	assert.Equal(t, 2, refused.Ahead)
	assert.Contains(t, err.Error(), "2 waiting start(s) are ahead in the queue")

	d.RingWaiters()
	w1.await(t)
	require.NoError(t, w1.err)
	assert.Equal(t, snap.Queue[0].RunID, w1.res.Rec.RunID, "the run keeps its ticket's id")
	require.NotNil(t, w1.res.Rec.QueuedAt)
	assert.True(t, w1.lastProgress().Admitted)
	assert.False(t, w2.finished(), "one slot, one admission")

	releaseAll(w1.res)
	d.RingWaiters()
	w2.await(t)
	require.NoError(t, w2.err)
	assert.Equal(t, snap.Queue[1].RunID, w2.res.Rec.RunID)
	assert.Empty(t, queueFiles(t, d), "admitted waiters leave no ticket, lock or bell")
}

func TestQueueWaitTimeout(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	holder := admit(t, d, "holder")

	for _, c := range []struct {
		task string
		kind vocab.RefusalKind
	}{{"other", vocab.SlotsBusy}, {"holder", vocab.TaskActive}} {
		req := admitReq(c.task)
		req.Wait = true
		req.WaitTimeout = 100 * time.Millisecond
		start := time.Now()
		res, err := d.Admit(context.Background(), req)
		assert.Nil(t, res)
		var refused *vocab.RefusedError
		require.ErrorAs(t, err, &refused, c.task)
		assert.Equal(t, c.kind, refused.Kind, c.task)
		assert.Equal(t, 100*time.Millisecond, refused.WaitedFor)
		assert.Contains(t, err.Error(), "gave up after waiting 100ms")
		assert.Less(t, time.Since(start), 5*time.Second)
		assert.Empty(t, queueFiles(t, d), "a waiter that gives up removes its ticket")
	}
	assert.Equal(t, []string{string(holder.Rec.RunID) + ".run"}, activeNames(t, d))
}

// A waiter whose wait is cancelled (crew received a signal) leaves no
// ticket, and Start records nothing.
func TestQueueSignalWhileWaiting(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	admit(t, d, "holder")

	sigs := make(chan os.Signal, 1)
	req, _, _ := startRequest("patient", "echo", "never")
	req.Wait = true
	req.Signals = sigs
	done := make(chan startResult, 1)
	go func() {
		code, id, err := startCode(d, req)
		done <- startResult{code, id, err}
	}()
	waitFor(t, "the start to queue", 10*time.Second, func() bool { return queueLen(t, d) == 1 })
	sigs <- syscall.SIGTERM
	r := awaitStart(t, done, 10*time.Second)
	assert.Equal(t, 143, r.code)
	var sig *vocab.SignalledError
	require.ErrorAs(t, r.err, &sig)
	assert.Empty(t, sig.RunID)
	assert.Empty(t, queueFiles(t, d))
	assert.Len(t, activeNames(t, d), 1)
}

// The ticket of a waiter that died (its lock is free) holds no place.
func TestQueueDeadWaiterDoesNotBlock(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	require.NoError(t, d.Logs.Ensure())
	id := record.NewRunID(time.Now())
	writeTicketFile(t, lay(d), (&record.Ticket{Version: record.TicketVersion, RunID: id, Task: "ghost",
		Command: []string{"true"}, Host: "h", PID: 1, CreatedAt: time.Now().UTC()}))
	require.NoError(t, os.WriteFile(lay(d).ticketLock(id), nil, 0o600))

	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	assert.Empty(t, snap.Queue, "status does not list dead waiters")
	assert.NotEmpty(t, queueFiles(t, d), "and does not remove them")

	res := admit(t, d, "alive")
	assert.Equal(t, 0, res.Rec.SlotsInUse)
	assert.Empty(t, queueFiles(t, d), "admission tidies dead tickets away")
}

func TestRecoverSweepsDeadTickets(t *testing.T) {
	d := newDispatcher(t)
	require.NoError(t, d.Logs.Ensure())
	id := record.NewRunID(time.Now())
	writeTicketFile(t, lay(d), (&record.Ticket{Version: record.TicketVersion, RunID: id, Task: "ghost",
		Command: []string{"true"}, Host: "h", PID: 1, CreatedAt: time.Now().UTC()}))
	orphanLock := record.NewRunID(time.Now())
	require.NoError(t, os.WriteFile(lay(d).ticketLock(orphanLock), nil, 0o600))

	before := treeSnapshot(t, d.Logs.Root())
	dry, err := d.Admin().Recover(recoverOpts(true))
	require.NoError(t, err)
	assert.Equal(t, before, treeSnapshot(t, d.Logs.Root()))
	assert.Equal(t, 2, dry.Count(vocab.Cleaned))

	report, err := d.Admin().Recover(recoverOpts(false))
	require.NoError(t, err)
	assert.Equal(t, 2, report.Count(vocab.Cleaned), "%+v", report.Items)
	assert.Equal(t, "ghost", itemsFor(report)[string(id)][0].Task)
	assert.Empty(t, queueFiles(t, d))
}

// A waiter blocked by its pool or its task does not hold up younger
// waiters that can run, and two waiters of one task go oldest first.
func TestQueueHasNoHeadOfLineBlocking(t *testing.T) {
	d := newDispatcher(t)
	_, err := d.Admin().Init(3, true, []vocab.PoolChange{{Name: "deploy", Max: 1}}, time.Second)
	require.NoError(t, err)
	req := admitReq("deploy-a")
	req.Pool = "deploy"
	deployA, err := d.Admit(context.Background(), req)
	require.NoError(t, err)
	t.Cleanup(func() { releaseAll(deployA) })
	busy := admit(t, d, "busy")

	poolWaiter := startWaiter(t, d, "deploy-b", "deploy", 0)
	taskWaiter := startWaiter(t, d, "busy", "", 0)
	assert.False(t, poolWaiter.finished())
	assert.False(t, taskWaiter.finished())
	assert.Equal(t, admission.WaitPool, poolWaiter.lastProgress().Reason)
	assert.Equal(t, admission.WaitTask, taskWaiter.lastProgress().Reason)
	require.NotNil(t, taskWaiter.lastProgress().BlockingRun)
	assert.Equal(t, busy.Rec.RunID, taskWaiter.lastProgress().BlockingRun.RunID)

	// A younger waiter that fits is admitted at once, past both.
	free := startWaiter(t, d, "free", "", 0)
	free.await(t)
	require.NoError(t, free.err)

	// A second waiter of "busy" lines up behind the first.
	taskWaiter2 := startWaiter(t, d, "busy", "", 0)
	snap, err := d.Status(vocab.StatusQuery{Task: "busy"})
	require.NoError(t, err)
	require.Len(t, snap.Queue, 2)
	assert.Equal(t, admission.WaitTask, snap.Queue[1].WaitingFor)

	releaseAll(busy)
	releaseAll(free.res)
	d.RingWaiters()
	taskWaiter.await(t)
	require.NoError(t, taskWaiter.err)
	assert.False(t, taskWaiter2.finished(), "the younger waiter of the task waits for the older's run")
	assert.False(t, poolWaiter.finished(), "the pool is still full")

	snap, err = d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	require.Len(t, snap.Pools, 1)
	assert.Equal(t, vocab.PoolView{Name: "deploy", MaximumInProgress: 1, InUse: 1}, snap.Pools[0])
}

func TestPools(t *testing.T) {
	d := newDispatcher(t)
	res, err := d.Admin().Init(3, true, []vocab.PoolChange{{Name: "deploy", Max: 1}, {Name: "test", Max: 2}}, time.Second)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"deploy": 1, "test": 2}, res.Pools)

	poolReq := func(task, pool string) vocab.AdmitRequest {
		r := admitReq(task)
		r.Pool = pool
		return r
	}
	first, err := d.Admit(context.Background(), poolReq("d1", "deploy"))
	require.NoError(t, err)
	t.Cleanup(func() { releaseAll(first) })
	assert.Equal(t, "deploy", first.Rec.Pool)

	_, err = d.Admit(context.Background(), poolReq("d2", "deploy"))
	var refused *vocab.RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, vocab.SlotsBusy, refused.Kind)
	assert.True(t, refused.PoolFull)
	assert.Equal(t, "deploy", refused.Pool)
	assert.Equal(t, 1, refused.PoolInUse)
	assert.Equal(t, 1, refused.PoolMax)
	assert.Contains(t, err.Error(), `pool "deploy" is full (1/1 in use; all slots 1/3)`)

	// Without a pool, only the global cap counts.
	admit(t, d, "plain")

	// Forced past a full pool, and recorded.
	req := poolReq("d3", "deploy")
	req.Force = true
	forced, err := d.Admit(context.Background(), req)
	require.NoError(t, err)
	t.Cleanup(func() { releaseAll(forced) })
	assert.True(t, forced.Rec.Forced)
	assert.Contains(t, forced.Rec.Reason, "pool deploy 1/1")

	// An unknown pool is a usage error naming the configured ones.
	_, err = d.Admit(context.Background(), poolReq("x", "nope"))
	var usage *vocab.UsageError
	require.ErrorAs(t, err, &usage)
	assert.Contains(t, usage.Error(), `unknown pool "nope"; configured pools: deploy, test`)

	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	assert.Equal(t, []vocab.PoolView{{Name: "deploy", MaximumInProgress: 1, InUse: 2}, {Name: "test", MaximumInProgress: 2, InUse: 0}}, snap.Pools)

	// Removing a pool keeps the others and the cap.
	res, err = d.Admin().Init(0, false, []vocab.PoolChange{{Name: "test", Max: 0}}, time.Second)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"deploy": 1}, res.Pools)
	assert.Equal(t, 3, res.New)
	res, err = d.Admin().Init(0, false, []vocab.PoolChange{{Name: "deploy", Max: 0}}, time.Second)
	require.NoError(t, err)
	assert.Empty(t, res.Pools)
	_, err = d.Admit(context.Background(), poolReq("y", "deploy"))
	require.ErrorAs(t, err, &usage)
	assert.Contains(t, usage.Error(), "no pools are configured")
}

func TestInitRejectsBadPools(t *testing.T) {
	for name, change := range map[string]vocab.PoolChange{
		"empty name":    {Name: "", Max: 1},
		"control char":  {Name: "a\nb", Max: 1},
		"negative size": {Name: "deploy", Max: -1},
	} {
		t.Run(name, func(t *testing.T) {
			d := newDispatcher(t)
			_, err := d.Admin().Init(2, true, []vocab.PoolChange{change}, time.Second)
			var usage *vocab.UsageError
			require.ErrorAs(t, err, &usage)
			assert.NoDirExists(t, d.Logs.Root(), "bad input changes nothing")
		})
	}
}

// Raising the cap with Init lets a waiter in without waiting for the poll.
func TestInitRaisingTheCapWakesWaiters(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	admit(t, d, "holder")
	w := startWaiter(t, d, "waiter", "", 0)
	start := time.Now()
	setCap(t, d, 2)
	w.await(t)
	require.NoError(t, w.err)
	assert.Less(t, time.Since(start), 2*time.Second, "woken by the bell, not the fallback poll")
}

// A context cancelled while waiting returns its error and leaves no ticket.
func TestQueueCancelledWait(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	admit(t, d, "holder")
	ctx, cancel := context.WithCancel(context.Background())
	req := admitReq("w")
	req.Wait = true
	errc := make(chan error, 1)
	go func() {
		_, err := d.Admit(ctx, req)
		errc <- err
	}()
	waitFor(t, "the waiter to queue", 10*time.Second, func() bool { return queueLen(t, d) == 1 })
	cancel()
	select {
	case err := <-errc:
		assert.True(t, errors.Is(err, context.Canceled), "%v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled wait did not return")
	}
	assert.Empty(t, queueFiles(t, d))
}
