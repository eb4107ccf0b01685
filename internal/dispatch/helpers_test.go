package dispatch_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// newDispatcher returns a dispatcher on a state root that does not exist
// yet (a fresh directory under t.TempDir()).
func newDispatcher(t *testing.T) *dispatch.Dispatcher {
	t.Helper()
	return dispatch.New(filepath.Join(t.TempDir(), "state"))
}

// setCap writes crew.json with maximumInProgress n.
func setCap(t *testing.T, d *dispatch.Dispatcher, n int) {
	t.Helper()
	res, err := d.Admin().Init(n, true, nil, time.Second)
	require.NoError(t, err)
	require.Equal(t, n, res.New)
}

func admitReq(task string) vocab.AdmitRequest {
	return vocab.AdmitRequest{Task: task, Command: []string{"true"}, LockTimeout: 5 * time.Second}
}

// admit reserves a slot for task and fails the test if it is refused. The
// reservation's locks are released when the test ends.
func admit(t *testing.T, d *dispatch.Dispatcher, task string) *dispatch.Reservation {
	t.Helper()
	res, err := d.Admit(context.Background(), admitReq(task))
	require.NoError(t, err, "admit %q", task)
	t.Cleanup(func() { releaseAll(res) })
	return res
}

// releaseAll lets go of a reservation's locks without finalizing the run,
// as if every process of the run had died. Releasing twice is harmless.
func releaseAll(res *dispatch.Reservation) { res.Run.Release(); res.Starter.Close() }

// finishQuietly makes a reserved run final as its supervisor does, but
// rings nobody: its slot is free, and no waiter has been told.
func finishQuietly(t *testing.T, res *dispatch.Reservation) {
	t.Helper()
	code := 0
	res.Rec.Finish(record.Succeeded, time.Now().UTC(), &code, "")
	require.NoError(t, res.Run.Finish(res.Rec))
	res.Starter.Close()
}

// holdOwner takes the owner lock at path on a file description of its own,
// as another process would; the lock is released when the test ends.
func holdOwner(t *testing.T, path string) *lockfs.Lock { return lockAt(t, path) }

// writeCorruptActive puts an unreadable record under a well-formed run id
// file name in runs/active and returns its id and path.
func writeCorruptActive(t *testing.T, d *dispatch.Dispatcher, content string) (record.RunID, string) {
	t.Helper()
	require.NoError(t, d.Logs.Ensure())
	id := record.NewRunID(time.Now())
	path := lay(d).active(id)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return id, path
}

func activeNames(t *testing.T, d *dispatch.Dispatcher) []string {
	t.Helper()
	return dirNames(t, lay(d).activeDir())
}

// dirNames lists a directory of the state root, sorted; nil if missing.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func readDone(t *testing.T, d *dispatch.Dispatcher, id record.RunID) *record.Run {
	t.Helper()
	rec, err := d.Logs.ReadDone(id)
	require.NoError(t, err, "finished record of %s", id)
	return rec
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// treeSnapshot describes every file and directory under root: its mode and,
// for regular files, its content. skip names relative paths whose content
// is not compared (only their presence).
func treeSnapshot(t *testing.T, root string, skip ...string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	if !exists(root) {
		return snap
	}
	err := filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		fi, err := de.Info()
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		if fi.Mode().IsRegular() && !contains(skip, rel) {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		}
		snap[rel] = desc
		return nil
	})
	require.NoError(t, err)
	return snap
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// startRequest is a StartRequest with buffers for the command's output.
func startRequest(task string, command ...string) (vocab.StartRequest, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return vocab.StartRequest{
		AdmitRequest: vocab.AdmitRequest{Task: task, Command: command, LockTimeout: 5 * time.Second},
		Grace:        200 * time.Millisecond,
		Stdout:       &stdout,
		Stderr:       &stderr,
		Env:          testEnv(),
	}, &stdout, &stderr
}

// testEnv is this process's environment without CREW_ variables, so that the
// test's expectations about them do not depend on who runs the tests.
func testEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CREW_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// soak reports whether soak tests run at length (`make soak` sets
// CREW_SOAK=1); every CI pass runs them short.
func soak() bool { return os.Getenv("CREW_SOAK") == "1" }

// soakFor is how long a soak loop runs at least: d under `make soak`,
// nothing otherwise (soakRounds then bounds it).
func soakFor(d time.Duration) time.Duration {
	if soak() {
		return d
	}
	return 0
}

// soakRounds is how many rounds a soak loop runs at least.
func soakRounds(n int) int { return n }
