//go:build etcd

package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/retention"
	"github.com/crew-dev/crew/internal/vocab"
)

// plantJunk writes keys under finished/ that crew did not write as it
// writes them: names that are no finish time and run id (sorting at
// either end of the index), a value that is no index entry, and a
// well-formed entry of a run that has no record (withFirst: one that sorts
// before every entry too). It returns how many.
func plantJunk(t *testing.T, f *Fleet, withFirst bool) int {
	t.Helper()
	future := "29991231T000000.000000000Z/"
	junk := map[string]string{
		f.k.finishedPrefix() + "0-sorts-first":                              `{"task":"x","state":"succeeded"}`,
		f.k.finishedPrefix() + "zzz-sorts-last":                             `{"task":"x","state":"succeeded"}`,
		f.k.finishedPrefix() + future + string(record.NewRunID(time.Now())): `not json`,
		f.k.finishedPrefix() + future + string(record.NewRunID(time.Now())): `{}`,
		f.k.finishedPrefix() + future + string(record.NewRunID(time.Now())): `{"task":"t","state":"succeeded","exitCode":0}`,
	}
	if !withFirst {
		delete(junk, f.k.finishedPrefix()+"0-sorts-first")
	}
	for k, v := range junk {
		_, err := f.cli.Put(context.Background(), k, v)
		require.NoError(t, err)
	}
	return len(junk)
}

func historyIDs(t *testing.T, d *dispatch.Dispatcher) []record.RunID {
	t.Helper()
	h, err := d.History(vocab.HistoryQuery{})
	require.NoError(t, err)
	var ids []record.RunID
	for _, r := range h.Runs {
		ids = append(ids, r.RunID)
	}
	return ids
}

// crew prune --keep N counts finished runs, never keys it did not write:
// junk under finished/ is reported, left alone, and never makes crew
// remove a run it should keep.
func TestPruneNeverCountsJunk(t *testing.T) {
	f := open(t)
	d := over(f)
	ids := putFinished(t, f, "t", 3)
	junk := plantJunk(t, f, true)

	keep := retention.Policy{KeepNewest: 2, OlderThan: retention.NoAgeRule}
	rep, err := d.Admin().Prune(dispatch.PruneOptions{Policy: keep})
	require.NoError(t, err)
	require.Len(t, rep.Removed, 1, "%+v", rep.Removed)
	assert.Equal(t, ids[0], rep.Removed[0].RunID, "only the oldest run goes")
	assert.Equal(t, 2, rep.Kept)
	assert.Len(t, rep.Errors, junk, "each junk key is reported: %q", rep.Errors)
	assert.Equal(t, []record.RunID{ids[2], ids[1]}, historyIDs(t, d))

	got, err := f.cli.Get(context.Background(), f.k.finishedPrefix(), clientv3WithPrefix()...)
	require.NoError(t, err)
	assert.EqualValues(t, 2+junk, got.Count, "junk is left alone")
}

// The lazy prune of a finishing run keeps the configured number of runs
// whatever junk the index holds: junk is neither counted (at the newest
// end) nor a stop (at the oldest end).
func TestLazyPruneNeverCountsJunk(t *testing.T) {
	for name, withFirst := range map[string]bool{"AtTheNewestEnd": false, "AtBothEnds": true} {
		t.Run(name, func(t *testing.T) {
			f := open(t)
			d := over(f)
			_, err := d.Admin().Init(4, true, nil, 5*time.Second, vocab.SetRetain(2))
			require.NoError(t, err)
			plantJunk(t, f, withFirst)
			var ids []record.RunID
			for range 3 {
				id, err := d.Start(startReq("t", "true"))
				require.NoError(t, err)
				ids = append(ids, id)
				if len(ids) == 2 {
					assert.Equal(t, []record.RunID{ids[1], ids[0]}, historyIDs(t, d), "two runs are kept")
				}
			}
			assert.Equal(t, []record.RunID{ids[2], ids[1]}, historyIDs(t, d), "the oldest run went, the two newest stay")
		})
	}
}
