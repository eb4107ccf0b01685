package e2e

// Issue 23: history and retention never lose or hide a run, and crew logs
// says when a run has no output to show.

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A run whose command was never started (not found: 127) has no output:
// crew logs says so and exits 1, as the README promises; logs -f exits
// like crew wait. A run that started and printed nothing is not such a
// run: its empty log prints nothing, exit 0.
func TestLogsOfARunThatNeverStarted(t *testing.T) {
	e := newEnv(t)
	r := e.run("start", "missing", "--", "/nonexistent/command")
	require.Equal(t, 127, r.Code, r.Stderr)
	id := e.finishedRun("missing").RunID

	for _, arg := range []string{"missing", id} {
		r = e.run("logs", arg)
		assert.Equal(t, 1, r.Code, "crew logs %s: %s", arg, r.Stderr)
		assert.Equal(t, "crew: missing: run "+id+" has no log (it never started a command)\n", r.Stderr)
		assert.Empty(t, r.Stdout)
	}
	r = e.run("logs", "-f", "missing")
	assert.Equal(t, 127, r.Code, "logs -f exits like crew wait: %s", r.Stderr)
	assert.Empty(t, r.Stdout)

	require.Equal(t, 0, e.run("start", "quiet", "--", "true").Code)
	r = e.run("logs", "quiet")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Empty(t, r.Stdout+r.Stderr)
}
