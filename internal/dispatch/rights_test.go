package dispatch_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// A waiting start leaves the queue only for a stop request of its own
// user or root: one another member of a shared root wrote (the file is
// theirs, whatever it says) is ignored, and the start keeps its place.
func TestWaiterIgnoresAnotherUsersStopRequest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root can give a file to another user")
	}
	d := newDispatcher(t)
	setCap(t, d, 1)
	holder := admit(t, d, "holder")
	defer releaseAll(holder)
	w := startWaiter(t, d, "waiting", "", 0)
	id := w.lastProgress().RunID

	req := &record.StopRequest{PID: 1, User: "root", Signal: "SIGKILL", Signo: int(syscall.SIGKILL), At: time.Now()}
	b, err := req.Encode()
	require.NoError(t, err)
	tmp := filepath.Join(lay(d).ownersDir(), ".by-hand")
	require.NoError(t, os.WriteFile(tmp, b, 0o600))
	require.NoError(t, os.Chown(tmp, 65534, -1))
	require.NoError(t, os.Rename(tmp, filepath.Join(lay(d).ownersDir(), string(id)+".stop")))
	w.mu.Lock()
	reports := len(w.progress)
	w.mu.Unlock()
	d.Logs.Queue().Ring(id)
	waitFor(t, "the waiter to look again and stay in line", 10*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.progress) > reports || w.finished()
	})
	require.False(t, w.finished(), "the waiter left on another user's request: %v", w.err)
	assert.Equal(t, 1, w.lastProgress().Position)

	// Its own user's request (root's, here) is obeyed.
	own := *req
	own.Signal, own.Signo = "SIGTERM", int(syscall.SIGTERM)
	require.NoError(t, d.Logs.WriteStopRequest(id, &own))
	d.Logs.Queue().Ring(id)
	w.await(t)
	var sig *vocab.SignalledError
	require.ErrorAs(t, w.err, &sig)
	assert.Equal(t, syscall.SIGTERM, sig.Signal)
}
