package dispatch_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// History, Status and Labelled select by labels on the records read (the
// index of finished runs knows none): a label carried by a few runs far
// back is found past the runs without it, and History says whether more
// runs match than its limit lets through.
func TestLabelFilters(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	var labelled []record.RunID // newest first
	for i := range 30 {
		req, _, _ := startRequest(fmt.Sprintf("job-%d", i), "true")
		if i%10 == 0 {
			req.Labels = record.Labels{"pipeline": "7", "n": fmt.Sprint(i)}
		}
		code, id, err := startCode(d, req)
		require.Equal(t, 0, code, "%v", err)
		if i%10 == 0 {
			labelled = append([]record.RunID{id}, labelled...)
		}
	}
	seven := record.Labels{"pipeline": "7"}
	ids := func(views []vocab.RunView) []record.RunID {
		var out []record.RunID
		for _, v := range views {
			out = append(out, v.RunID)
		}
		return out
	}

	h, err := d.History(vocab.HistoryQuery{Limit: 2, Labels: seven})
	require.NoError(t, err)
	assert.Equal(t, labelled[:2], ids(h.Runs))
	assert.True(t, h.More, "a third run has the label")
	assert.Equal(t, 2, h.Limit)
	h, err = d.History(vocab.HistoryQuery{Limit: 3, Labels: seven})
	require.NoError(t, err)
	assert.Equal(t, labelled, ids(h.Runs))
	assert.False(t, h.More, "three runs have it")
	h, err = d.History(vocab.HistoryQuery{Limit: 0, Labels: record.Labels{"pipeline": "7", "n": "10"}})
	require.NoError(t, err)
	assert.Equal(t, labelled[1:2], ids(h.Runs), "every label given")
	h, err = d.History(vocab.HistoryQuery{Limit: 29})
	require.NoError(t, err)
	assert.Len(t, h.Runs, 29)
	assert.True(t, h.More, "without labels too")
	h, err = d.History(vocab.HistoryQuery{Limit: 30})
	require.NoError(t, err)
	assert.False(t, h.More)

	snap, err := d.Status(vocab.StatusQuery{Labels: seven})
	require.NoError(t, err)
	assert.Equal(t, labelled, ids(snap.Finished), "status: the labelled runs, past the 10 newest")
	snap, err = d.Status(vocab.StatusQuery{Task: "job-10", Labels: seven})
	require.NoError(t, err)
	assert.Equal(t, labelled[1:2], ids(snap.Finished))

	all, err := d.Labelled(seven)
	require.NoError(t, err)
	assert.Equal(t, []record.RunID{labelled[2], labelled[1], labelled[0]}, all, "in creation order")
	none, err := d.Labelled(record.Labels{"pipeline": "8"})
	require.NoError(t, err)
	assert.Empty(t, none)
}
