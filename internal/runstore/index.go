package runstore

import (
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/stateroot"
)

// finishedRecords are the records as the index of finished runs reads
// them (finishindex.Records): the index is derived from them, never the
// other way round.
type finishedRecords struct{ *Store }

// ActiveIDs is the set of run ids with a file in the active set.
func (r finishedRecords) ActiveIDs() map[record.RunID]bool {
	out := map[record.RunID]bool{}
	dir, err := r.layout(activeDir)
	if err != nil {
		return out
	}
	names, _ := listNames(dir)
	for _, n := range names {
		if id, ok := stateroot.CutRecordName(n); ok {
			out[id] = true
		}
	}
	return out
}

// compactIfDue compacts the index of finished runs if an append of this
// process asked for it. Callers hold no lock of crew's (never the
// admission lock): it reads and rewrites the whole index.
func (s *Store) compactIfDue() { s.index.CompactIfDue() }
