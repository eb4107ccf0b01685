package e2e

// Zero limits (issue 24, item 9): `--timeout 0` is no timeout, as
// coreutils `timeout 0`; `--wait=0` does not wait, as `flock -w 0`: it is
// a start without --wait, refused at once if it cannot run now.

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTimeoutZeroIsNoTimeout(t *testing.T) {
	e := newEnv(t)
	for i, arg := range [][]string{{"--timeout", "0"}, {"--timeout=0s"}} {
		task := fmt.Sprintf("quick%d", i)
		r := e.run(append(append([]string{"start"}, arg...), task, "--", "sh", "-c", "exit 3")...)
		assert.Equal(t, 3, r.Code, "%v: %s", arg, r.Stderr)
		run := e.finishedRun(task)
		assert.Equal(t, "failed", run.State, "%v: the command's own end, no timeout", arg)
		assert.NotContains(t, e.run("status", run.RunID).Stdout, "Timeout:", "%v: the run has no timeout", arg)
	}
	r := e.run("start", "--timeout=-5m", "quick", "--", "true")
	assert.Equal(t, 64, r.Code)
	assert.Contains(t, r.Stderr, "crew: --timeout must not be negative, not -5m: give how long the command may run, as in --timeout=10m (0: no timeout)")
}

func TestWaitZeroDoesNotWait(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	marker := filepath.Join(e.dir, "ran")
	for _, arg := range []string{"--wait=0", "--wait=0s"} {
		r := e.run("start", arg, "other", "--", "touch", marker)
		assert.Equal(t, 75, r.Code, "%s: refused at once: %s", arg, r.Stderr)
		assert.Contains(t, r.Stderr, "crew: other: not admitted: all slots are busy", arg)
		entries, err := os.ReadDir(filepath.Join(e.root, "queue"))
		require.NoError(t, err)
		assert.Empty(t, entries, "%s took no place in line", arg)
	}
	r := e.run("start", "--wait=0", "holder", "--", "true")
	assert.Equal(t, 76, r.Code, "the task's own run: %s", r.Stderr)
	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	assert.NoFileExists(t, marker)

	r = e.run("start", "--wait=0", "other", "--", "touch", marker)
	assert.Equal(t, 0, r.Code, "a free slot: it runs: %s", r.Stderr)
	assert.FileExists(t, marker)
	// As a start without --wait, it goes with --force.
	r = e.run("start", "--wait=0", "--force", "forced", "--", "true")
	assert.Equal(t, 0, r.Code, r.Stderr)
	r = e.run("start", "--wait=-1s", "other", "--", "true")
	assert.Equal(t, 64, r.Code)
	assert.Contains(t, r.Stderr, `crew: --wait "-1s": must not be negative (--wait=0 does not wait)`)
}
