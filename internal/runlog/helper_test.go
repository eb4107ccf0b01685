package runlog_test

import (
	"path/filepath"
	"testing"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/storetest"
)

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

// writeDone writes rec as a finished record, as an outsider would.
func writeDone(t testing.TB, s *runstore.Store, rec *record.Run) {
	t.Helper()
	b, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	storetest.MkdirAll(t, filepath.Dir(s.DonePath(rec.RunID)))
	storetest.WriteString(t, s.DonePath(rec.RunID), string(b))
}
