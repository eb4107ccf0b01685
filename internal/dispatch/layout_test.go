package dispatch_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

// layout is the state root's documented layout, for tests that plant or
// inspect files the way an operator (or an attacker) would. Product code
// never builds these paths: runstore owns them.
type layout struct{ root string }

func lay(d *dispatch.Dispatcher) layout { return layout{d.Logs.Root()} }

func (l layout) path(rel ...string) string {
	return filepath.Join(append([]string{l.root}, rel...)...)
}
func (l layout) config() string        { return l.path("crew.json") }
func (l layout) holder() string        { return l.path(".locks", "dispatch-admission.holder") }
func (l layout) activeDir() string     { return l.path("runs", "active") }
func (l layout) doneDir() string       { return l.path("runs", "done") }
func (l layout) ownersDir() string     { return l.path("owners") }
func (l layout) queueDir() string      { return l.path("queue") }
func (l layout) quarantineDir() string { return l.path("quarantine") }
func (l layout) active(id record.RunID) string {
	return l.path("runs", "active", string(id)+".run")
}
func (l layout) done(id record.RunID) string {
	return l.path("runs", "done", id.Shard(), string(id)+".run")
}
func (l layout) ownerLock(id record.RunID) string { return l.path("owners", string(id)+".lock") }
func (l layout) supervisorLock(id record.RunID) string {
	return l.path("owners", string(id)+".supervisor.lock")
}
func (l layout) ticket(id record.RunID) string     { return l.path("queue", string(id)+".json") }
func (l layout) ticketLock(id record.RunID) string { return l.path("queue", string(id)+".lock") }
func (l layout) log(id record.RunID) string        { return l.path("logs", string(id)+".log") }

// writeRecordFile writes rec as a file at path, as crew would have.
func writeRecordFile(t *testing.T, path string, rec *record.Run) {
	t.Helper()
	b, err := runstore.EncodeRecordFile(rec)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// writeTicketFile writes a queue ticket as a waiting start would have.
func writeTicketFile(t *testing.T, l layout, tk *record.Ticket) {
	t.Helper()
	b, err := json.Marshal(tk)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(l.queueDir(), 0o700))
	require.NoError(t, os.WriteFile(l.ticket(tk.RunID), b, 0o600))
}

// lockAt takes the lock file at path (creating it) on a file description
// of its own, as another process would; released when the test ends.
func lockAt(t *testing.T, path string) *lockfs.Lock {
	t.Helper()
	dir, err := os.OpenRoot(filepath.Dir(path))
	require.NoError(t, err)
	t.Cleanup(func() { dir.Close() })
	l, err := lockfs.Create(dir, filepath.Base(path))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release() })
	return l
}

// probeAt reports whether a living process holds the lock file at path.
func probeAt(t *testing.T, path string) bool {
	t.Helper()
	dir, err := os.OpenRoot(filepath.Dir(path))
	if os.IsNotExist(err) {
		return false
	}
	require.NoError(t, err)
	defer dir.Close()
	held, err := lockfs.Probe(dir, filepath.Base(path))
	require.NoError(t, err)
	return held
}

// readRecordAt reads and decodes the record file at path.
func readRecordAt(path string) (*record.Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return runstore.DecodeRecord(b)
}

// orphanize makes an admitted run look like an orphan: its supervisor is
// gone (the supervisor lock is free) while its command still holds the
// owner lock (here: a file description of the test's own, returned: release
// it to let the command "exit").
func orphanize(t *testing.T, d *dispatch.Dispatcher, res *dispatch.Reservation) *lockfs.Lock {
	t.Helper()
	res.Run.Release()
	dir, err := os.OpenRoot(lay(d).ownersDir())
	require.NoError(t, err)
	t.Cleanup(func() { dir.Close() })
	l, err := lockfs.Take(dir, filepath.Base(lay(d).ownerLock(res.Rec.RunID)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release() })
	return l
}

// sameFile reports whether f is the file at path.
func sameFile(t *testing.T, f *os.File, path string) bool {
	t.Helper()
	a, err := f.Stat()
	require.NoError(t, err)
	b, err := os.Stat(path)
	require.NoError(t, err)
	return os.SameFile(a, b)
}
