package supervise

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// The detached supervisor's one line carries to crew start --detach how the
// run ended before its command ran, so that it exits as a foreground start
// would.
func TestReadyLineRoundTrip(t *testing.T) {
	const id = record.RunID("r-20261201T000000.000000000Z-0123456789abcdef")
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"stopped by crew stop", &vocab.SignalledError{Signal: syscall.SIGTERM, RunID: id, By: "crew stop (pid 42, user ann)"}},
		{"signal crew received", &vocab.SignalledError{Signal: syscall.SIGINT, RunID: id}},
		{"command not found", &vocab.LaunchError{RunID: id, NotFound: true, Reason: "exec: \"nope\": not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := handoverResult(nil, id, readyLine(tc.err))
			assert.Equal(t, tc.err.Error(), got.Error())
			assert.IsType(t, tc.err, got)
		})
	}
	require.NoError(t, handoverResult(nil, id, "running"))
}
