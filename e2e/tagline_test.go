package e2e

// --tag keeps lines whole (issue 24, item 9): a line of 300,000 bytes is
// one tagged line, as GNU parallel --tag keeps it, not five pieces of 64
// KiB each tagged anew; the log keeps it untagged.

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTagKeepsALongLineWhole(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("a", 300000)
	r := e.run("start", "--tag", "big", "--", "sh", "-c", `head -c 300000 /dev/zero | tr '\0' a; echo; echo next`)
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "big\t"+long+"\nbig\tnext\n", r.Stdout, "one tagged line, whole, then the next")
	assert.Equal(t, long+"\nnext\n", readLog(t, e.finishedRun("big")), "the log has the output untagged")

	r = e.run("start", "--tag", "err", "--", "sh", "-c", `head -c 300000 /dev/zero | tr '\0' b >&2`)
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "err\t"+strings.Repeat("b", 300000)+"\n", r.Stderr, "stderr's too, and a last line without its newline ended with one")
}
