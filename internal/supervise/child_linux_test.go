//go:build linux

package supervise

import (
	"fmt"
	"os"
	"os/exec"
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
// cmd.Wait reaps it.
func TestWatchChildSeesStopsAndExitWithoutReaping(t *testing.T) {
	cmd := exec.Command("sh", "-c", "kill -TSTP $$; kill -STOP $$; exit 3")
	// A group of its own, whose parent (the test) is in another group of
	// the same session: not orphaned, so SIGTSTP stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	events := watchChild(cmd)

	ev := nextEvent(t, events)
	assert.False(t, ev.exited)
	assert.Equal(t, syscall.SIGTSTP, ev.stopSig)
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	ev = nextEvent(t, events)
	assert.False(t, ev.exited)
	assert.Equal(t, syscall.SIGSTOP, ev.stopSig, "each stop is seen once, then the next")
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))

	ev = nextEvent(t, events)
	assert.True(t, ev.exited)
	assert.False(t, ev.reaped)
	assert.Equal(t, byte('Z'), procState(t, cmd.Process.Pid), "seen exited, not reaped")
	_, open := <-events
	assert.False(t, open, "the watcher is done after the exit")
	require.Error(t, cmd.Wait())
	assert.Equal(t, 3, cmd.ProcessState.ExitCode(), "cmd.Wait reaps it and gets its status")
}

// TestWatchChildSeesAKill: a child killed by a signal is an exit too.
func TestWatchChildSeesAKill(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	events := watchChild(cmd)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	ev := nextEvent(t, events)
	assert.True(t, ev.exited)
	assert.Equal(t, byte('Z'), procState(t, cmd.Process.Pid))
}
