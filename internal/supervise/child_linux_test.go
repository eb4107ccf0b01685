//go:build linux

package supervise

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func nextEvent(t *testing.T, events <-chan childEvent) childEvent {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event from the child watcher")
		return childEvent{}
	}
}

func procState(t *testing.T, pid int) byte {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0][0]
}

// TestWatchChildSeesStopsAndExitWithoutReaping: a stop is reported (and
// consumed, so it is reported once), and the exit is reported while the
// child is still a zombie, so its pid and group id stay pinned until
// child.reap reaps it.
func TestWatchChildSeesStopsAndExitWithoutReaping(t *testing.T) {
	// A group of its own, whose parent (the test) is in another group of
	// the same session: not orphaned, so SIGTSTP stops it.
	cmd := startTestChild(t, &syscall.SysProcAttr{Setpgid: true}, "sh", "-c", "kill -TSTP $$; kill -STOP $$; exit 3")
	events := watchChild(cmd)

	ev := nextEvent(t, events)
	assert.False(t, ev.exited)
	assert.Equal(t, syscall.SIGTSTP, ev.stopSig)
	require.NoError(t, syscall.Kill(cmd.pid, syscall.SIGCONT)) // unreaped: still ours
	ev = nextEvent(t, events)
	assert.False(t, ev.exited)
	assert.Equal(t, syscall.SIGSTOP, ev.stopSig, "each stop is seen once, then the next")
	require.NoError(t, syscall.Kill(cmd.pid, syscall.SIGCONT))

	ev = nextEvent(t, events)
	assert.True(t, ev.exited)
	assert.False(t, ev.reaped)
	assert.Equal(t, byte('Z'), procState(t, cmd.pid), "seen exited, not reaped")
	_, open := <-events
	assert.False(t, open, "the watcher is done after the exit")
	assert.Equal(t, 3, cmd.reap().ExitStatus(), "reap collects it and its status")
}

// TestWatchChildSeesAKill: a child killed by a signal is an exit too.
func TestWatchChildSeesAKill(t *testing.T) {
	cmd := startTestChild(t, nil, "sleep", "30")
	events := watchChild(cmd)
	require.NoError(t, syscall.Kill(cmd.pid, syscall.SIGKILL))
	ev := nextEvent(t, events)
	assert.True(t, ev.exited)
	assert.Equal(t, byte('Z'), procState(t, cmd.pid))
}

// startTestChild starts argv as crew starts a command; the test kills
// (while it is still unreaped, so still its own) and reaps it at the end.
func startTestChild(t *testing.T, sys *syscall.SysProcAttr, argv ...string) *child {
	t.Helper()
	c, err := startChild(argv, "", os.Environ(), nil, os.Stdout, os.Stderr, nil, sys)
	require.NoError(t, err)
	t.Cleanup(func() {
		if !c.reaped {
			_ = syscall.Kill(c.pid, syscall.SIGKILL)
			c.reap()
		}
	})
	return c
}
