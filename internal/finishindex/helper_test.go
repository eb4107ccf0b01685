package finishindex_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/stateroot"
	"github.com/crew-dev/crew/internal/storetest"
)

var indexBase = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// newStore is an ensured state root in a fresh directory.
func newStore(t testing.TB) *runstore.Store {
	t.Helper()
	return storetest.Ensured(t, runstore.New(storetest.RootPath(t)))
}

// osPath is the full path of a file of the state root, for the test's own
// checks and fixtures (which use os.* directly, as an outsider would).
func osPath(s *runstore.Store, rel ...string) string {
	return filepath.Join(append([]string{s.Root()}, rel...)...)
}

// shardDir is the shard of run id's finished record, relative to the
// state root.
func shardDir(id record.RunID) string { return filepath.Join("runs", "done", id.Shard()) }

// writeDone writes rec as a finished record, as an outsider would (an
// older crew, a copy by hand): no fsync, no index entry.
func writeDone(t testing.TB, s *runstore.Store, rec *record.Run) {
	t.Helper()
	b, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	storetest.MkdirAll(t, osPath(s, shardDir(rec.RunID)))
	storetest.WriteString(t, s.DonePath(rec.RunID), string(b))
}

// writeDoneFast writes a finished record of run id, for big fixtures.
func writeDoneFast(t testing.TB, s *runstore.Store, id record.RunID) {
	t.Helper()
	writeDone(t, s, storetest.Record(id, record.Succeeded))
}

// writeActive writes rec into the active set, as an outsider would.
func writeActive(t testing.TB, s *runstore.Store, rec *record.Run) {
	t.Helper()
	b, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	storetest.WriteString(t, osPath(s, "runs", "active", stateroot.V1RecordName(rec.RunID)), string(b))
}

// reserve reserves run id's slot, as a start does; its locks are
// released in t.Cleanup.
func reserve(t testing.TB, s *runstore.Store, id record.RunID) *runstore.RunLocks {
	t.Helper()
	a, err := s.LockAdmission(context.Background(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	l, err := a.Reserve(storetest.Record(id, record.Provisioning))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Release)
	return l
}

// finishAsSupervisor reserves rec's run and finishes it through RunLocks,
// as a run's own supervisor does.
func finishAsSupervisor(t testing.TB, s *runstore.Store, rec *record.Run) {
	t.Helper()
	l := reserve(t, s, rec.RunID)
	if err := l.Finish(rec); err != nil {
		t.Fatal(err)
	}
}
