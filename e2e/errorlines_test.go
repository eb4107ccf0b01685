package e2e

// Multi-line errors (issue 24, item 2): crew's own line breaks, and
// cobra's, print as line breaks; text from the state root stays escaped.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAmbiguousRunListsOneRunPerLine: the runs an ambiguous beginning of
// a run id fits are listed one per line, not after a literal \n, and a
// task name from the state root that holds a line separator or a
// right-to-left override (an older crew's) is shown escaped, on its run's
// line.
func TestAmbiguousRunListsOneRunPerLine(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for i := range 2 {
		r := e.run("start", "--detach", fmt.Sprintf("t%d", i), "--", "true")
		require.Equal(t, 0, r.Code, r.Stderr)
		ids = append(ids, strings.TrimSpace(r.Stdout))
		require.Equal(t, 0, e.run("wait", ids[i]).Code)
	}
	release, holder := e.holdSlot("planted")
	defer func() { release(); holder.wait(t, 10*time.Second) }()
	active := e.activeRun("planted")
	e.editActive(active.RunID, map[string]any{"task": "evil\u2028crew: fake line\u202e"})
	ids = append(ids, active.RunID)

	common := ids[0]
	for _, id := range ids[1:] {
		for !strings.HasPrefix(id, common) {
			common = common[:len(common)-1]
		}
	}
	r := e.run("logs", common)
	assert.Equal(t, 64, r.Code, r.Stderr)
	lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
	require.Len(t, lines, 6, "a first line, one per run, the hint, and the usage line:\n%s", r.Stderr)
	assert.Equal(t, "crew: "+common+" is ambiguous: it fits 3 runs:", lines[0])
	want := map[string]string{ids[0]: "succeeded  t0", ids[1]: "succeeded  t1", active.RunID: `running  "evil\u2028crew: fake line\u202e"`}
	for _, l := range lines[1:4] {
		id, rest, _ := strings.Cut(strings.TrimPrefix(l, "  "), "  ")
		assert.Equal(t, want[id], rest, "the line of %s: %q", id, l)
		delete(want, id)
	}
	assert.Empty(t, want, "every run has a line")
	assert.Equal(t, "give more of the id", lines[4])
	assert.Equal(t, "Run 'crew logs --help' for usage.", lines[5])
}

// TestCobraSuggestionsKeepTheirLines: cobra's own messages (an unknown
// command and what it may have meant) keep their line breaks; what the
// user typed is quoted with escapes.
func TestCobraSuggestionsKeepTheirLines(t *testing.T) {
	e := newEnv(t)
	r := e.run("strat", "build")
	assert.Equal(t, 64, r.Code)
	assert.Equal(t, "crew: unknown command \"strat\" for \"crew\"\n\nDid you mean this?\n\tstart\nRun 'crew --help' for usage.\n", r.Stderr)

	r = e.run("evil\x1b[2J\nline")
	assert.Equal(t, 64, r.Code)
	assert.Equal(t, "crew: unknown command \"evil\\x1b[2J\\nline\" for \"crew\"\nRun 'crew --help' for usage.\n", r.Stderr)
}
