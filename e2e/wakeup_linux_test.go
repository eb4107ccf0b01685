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
