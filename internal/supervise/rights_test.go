package supervise

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

// member is a user other than the supervisor's, as a member of a state
// root shared with a group would be.
const member = 65534

// writeRequestAs puts req in place as run id's stop request in a file
// owned by uid, as that user would have written it: made aside and
// renamed into place, so the supervisor never sees it owned by anyone
// else.
func writeRequestAs(t *testing.T, st *runstore.Store, id record.RunID, req *record.StopRequest, uid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("only root can give a file to another user")
	}
	b, err := req.Encode()
	require.NoError(t, err)
	dir := filepath.Join(st.Root(), "owners")
	tmp := filepath.Join(dir, ".hand-written")
	require.NoError(t, os.WriteFile(tmp, b, 0o600))
	require.NoError(t, os.Chown(tmp, uid, -1))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, string(id)+".stop")))
}

func killRequest() *record.StopRequest {
	return &record.StopRequest{PID: 4242, User: "root", Signal: "SIGKILL", Signo: int(syscall.SIGKILL), At: time.Now(), Grace: "1s"}
}

func eventsOf(rec *record.Run) string {
	var b strings.Builder
	for _, e := range rec.Events {
		b.WriteString(e.What + "\n")
	}
	return b.String()
}

const refusedNote = "refused a stop request (SIGKILL) written by "

// TestStopRequestOfAnotherUserIsRefused: a supervisor does not lend its
// rights: a request written by a user who is neither the run's own nor
// root is not carried out, whatever it says, and the run's record and the
// terminal say so; a request of its own user still is.
func TestStopRequestOfAnotherUserIsRefused(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })
	req := reserve(t, "sh", "-c", `while [ ! -e "$1" ]; do sleep 0.01; done`, "x", gate)
	var warned warnings
	req.Warn = warned.add
	done := supervise(req)
	rec := awaitRunning(t, req)

	writeRequestAs(t, req.Logs, rec.RunID, killRequest(), member)
	var noted *record.Run
	require.Eventually(t, func() bool {
		cur, err := req.Logs.ReadRun(rec.RunID)
		if err == nil && strings.Contains(eventsOf(cur), refusedNote) {
			noted = cur
		}
		return noted != nil
	}, 10*time.Second, 5*time.Millisecond, "the running record notes the refused request")
	assert.Equal(t, record.Running, noted.State, "nothing was signalled")
	assert.Contains(t, eventsOf(noted), refusedNote+"nobody (uid 65534): run "+string(rec.RunID)+" belongs to root (uid 0), and only its own user or root may stop it; nothing was signalled")
	assert.Contains(t, strings.Join(warned.all(), "\n"), refusedNote)
	select {
	case err := <-done:
		t.Fatalf("the run ended on a refused request: %v", err)
	default:
	}

	// Its own user's request (root's, here) is carried out.
	require.NoError(t, req.Logs.WriteStopRequest(rec.RunID, stopRequest("5s")))
	assert.Equal(t, 143, exitCodeOf(t, awaitResult(t, done)))
	final, err := req.Logs.ReadRun(rec.RunID)
	require.NoError(t, err)
	assert.Equal(t, record.Stopped, final.State)
	assert.Contains(t, final.Reason, "stopped by crew stop (pid 4242, user tester), which sent SIGTERM")
	assert.Equal(t, 1, strings.Count(eventsOf(final), refusedNote), "each refused request is noted once")
}

// TestStopRequestOfAnotherUserBeforeLaunch: a request another user wrote
// before the command started neither keeps it from running nor is taken
// for the reason it ended.
func TestStopRequestOfAnotherUserBeforeLaunch(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	req := reserve(t, "touch", marker)
	writeRequestAs(t, req.Logs, req.Rec.RunID, killRequest(), member)
	require.NoError(t, awaitResult(t, supervise(req)))
	assert.FileExists(t, marker)
	final, err := req.Logs.ReadRun(req.Rec.RunID)
	require.NoError(t, err)
	assert.Equal(t, record.Succeeded, final.State)
	assert.Empty(t, final.Reason, "not \"stopped by crew stop\"")
	assert.Equal(t, 1, strings.Count(eventsOf(final), refusedNote), "noted once, though read before the launch and by the wait loop")
}

// TestStopRequestOfAnotherUserWhileWaitingToRetry: between attempts too.
func TestStopRequestOfAnotherUserWhileWaitingToRetry(t *testing.T) {
	count := filepath.Join(t.TempDir(), "attempts")
	req := reserve(t, "sh", "-c", `echo >> "$1"; exit 1`, "x", count)
	req.Rec.Retries, req.Rec.RetryDelay = 1, record.Duration(time.Hour)
	done := supervise(req)
	require.Eventually(t, func() bool {
		cur, err := req.Logs.ReadRun(req.Rec.RunID)
		return err == nil && len(cur.Attempts) == 1 && cur.Attempts[0].EndedAt != nil
	}, 10*time.Second, 5*time.Millisecond, "the first attempt to fail")
	writeRequestAs(t, req.Logs, req.Rec.RunID, killRequest(), member)
	require.Eventually(t, func() bool {
		cur, err := req.Logs.ReadRun(req.Rec.RunID)
		return err == nil && strings.Contains(eventsOf(cur), refusedNote)
	}, 10*time.Second, 5*time.Millisecond, "the refusal to be noted")
	select {
	case err := <-done:
		t.Fatalf("the run ended on a refused request: %v", err)
	default:
	}
	require.NoError(t, req.Logs.WriteStopRequest(req.Rec.RunID, stopRequest("1s")))
	assert.Equal(t, 143, exitCodeOf(t, awaitResult(t, done)))
	final, err := req.Logs.ReadRun(req.Rec.RunID)
	require.NoError(t, err)
	assert.Equal(t, record.Stopped, final.State)
	assert.Contains(t, final.Reason, "stopped by crew stop (pid 4242, user tester) while waiting to retry")
	assert.Equal(t, 1, lines(t, count), "no second attempt ran")
}
