package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWaiterWakesWhenItsHolderDies: a run whose supervisor was killed
// with SIGKILL, and whose command then ended, frees its slot without a
// word (no bell rings, no record changes); the kernel tells the waiting
// start (its last holder closed the owner lock), which is admitted at
// once. The waiter's fallback poll is compiled out (queue-poll:skip), so
// only that news can wake it: without it, it would wait forever.
func TestWaiterWakesWhenItsHolderDies(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	waiter := e.start([]string{"CREW_FAILPOINT=queue-poll:skip"}, "start", "--wait", "next", "--", "true")
	e.waitQueued("next")

	require.NoError(t, holder.cmd.Process.Signal(syscall.SIGKILL)) // our own child: the supervisor
	holder.wait(t, 10*time.Second)
	assert.Len(t, e.queue().Queue, 1, "the orphaned command still holds the slot: the waiter waits")

	release() // the command ends: the owner lock's last holder is gone
	r := waiter.wait(t, 20*time.Second)
	assert.Equal(t, 0, r.Code, r.Stderr)
	s := e.status("next")
	require.Len(t, s.Finished, 1)
	assert.Equal(t, "succeeded", s.Finished[0].State)
	h := e.status("holder")
	require.Len(t, h.Finished, 1, "the dead run was finalized by the waiter's admission")
	assert.Equal(t, "interrupted", h.Finished[0].State)
}

// TestAWaiterKilledAsItIsRungHandsItsTurnOn: the waiting start at the head
// of the line is rung for the freed slot and dies before it takes it
// (SIGKILL as it wakes). Nobody rings again: the slot would stay free
// until a poll. The waiter behind it watches the lock of the one ahead of
// it (inotify on that file), is told of that death, and is admitted. Both
// polls are compiled out (queue-poll:skip): only that news can wake it.
func TestAWaiterKilledAsItIsRungHandsItsTurnOn(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	first := e.start([]string{"CREW_FAILPOINT=queue-poll:skip,queue-woken:kill"}, "start", "--wait", "first", "--", "true")
	e.waitQueued("first")
	second := e.start([]string{"CREW_FAILPOINT=queue-poll:skip"}, "start", "--wait", "second", "--", "true")
	e.waitQueued("second")

	release()
	holder.wait(t, 10*time.Second)
	r := first.wait(t, 20*time.Second)
	assert.Equal(t, 137, r.Code, "the first waiter was killed as it woke: %s", r.Stderr)
	r = second.wait(t, 20*time.Second)
	assert.Equal(t, 0, r.Code, r.Stderr)
	s := e.status("second")
	require.Len(t, s.Finished, 1)
	assert.Equal(t, "succeeded", s.Finished[0].State)
}

// TestTheWaiterBehindADeadOneRingsWhoMayGo: as above, but the waiter just
// behind the dead one cannot take its slot (its pool is full), and the one
// behind that can. The waiter told of the death rings whoever may go.
func TestTheWaiterBehindADeadOneRingsWhoMayGo(t *testing.T) {
	e := newEnv(t)
	r := e.run("init", "--max", "2", "--pool", "a=1", "--pool", "b=1")
	require.Equal(t, 0, r.Code, r.Stderr)
	releaseA, _ := e.holdSlot("holder-a", "--pool", "a")
	releaseB, holderB := e.holdSlot("holder-b", "--pool", "b")
	defer releaseA()
	first := e.start([]string{"CREW_FAILPOINT=queue-poll:skip,queue-woken:kill"}, "start", "--wait", "--pool", "b", "first", "--", "true")
	e.waitQueued("first")
	second := e.start([]string{"CREW_FAILPOINT=queue-poll:skip"}, "start", "--wait", "--pool", "a", "second", "--", "true")
	e.waitQueued("second")
	third := e.start([]string{"CREW_FAILPOINT=queue-poll:skip"}, "start", "--wait", "--pool", "b", "third", "--", "true")
	e.waitQueued("third")

	releaseB()
	holderB.wait(t, 10*time.Second)
	res := first.wait(t, 20*time.Second)
	assert.Equal(t, 137, res.Code, "the first waiter was killed as it woke: %s", res.Stderr)
	res = third.wait(t, 20*time.Second)
	assert.Equal(t, 0, res.Code, res.Stderr)
	assert.Len(t, e.queue().Queue, 1, "the waiter for pool a still waits")
	releaseA()
	res = second.wait(t, 20*time.Second)
	assert.Equal(t, 0, res.Code, res.Stderr)
}

// TestTheHeadRingsWhoMayGoWhenAHolderDies: only the head of the line
// watches the runs' locks (a finishing run wakes one waiter, not the
// line), so when a run dies without a word, the head is the one to tell
// the others. Here the head cannot take the freed slot (its pool is
// full) and the waiter behind it can; both polls are compiled out
// (queue-poll:skip), so only the head's ring can let it in.
func TestTheHeadRingsWhoMayGoWhenAHolderDies(t *testing.T) {
	e := newEnv(t)
	r := e.run("init", "--max", "2", "--pool", "a=1")
	require.Equal(t, 0, r.Code, r.Stderr)
	releaseA, _ := e.holdSlot("holder-a", "--pool", "a")
	defer releaseA()
	releaseB, holderB := e.holdSlot("holder-b")
	head := e.start([]string{"CREW_FAILPOINT=queue-poll:skip"}, "start", "--wait", "--pool", "a", "head", "--", "true")
	e.waitQueued("head")
	behind := e.start([]string{"CREW_FAILPOINT=queue-poll:skip"}, "start", "--wait", "behind", "--", "true")
	e.waitQueued("behind")

	require.NoError(t, holderB.cmd.Process.Signal(syscall.SIGKILL)) // our own child: the supervisor
	holderB.wait(t, 10*time.Second)
	releaseB() // the orphaned command ends: the slot is free, and nobody said so
	res := behind.wait(t, 20*time.Second)
	assert.Equal(t, 0, res.Code, res.Stderr)
	assert.Len(t, e.queue().Queue, 1, "the waiter for pool a still waits")
	releaseA()
	res = head.wait(t, 20*time.Second)
	assert.Equal(t, 0, res.Code, res.Stderr)
}
