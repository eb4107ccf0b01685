//go:build etcd

package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// putFinished writes n finished runs of task, as their supervisors leave
// them (final record and index entry), oldest first, a second apart, and
// returns their ids in that order. The writes go in transactions of
// etcdMaxTxnOps operations at most, as the test server allows.
func putFinished(t *testing.T, f *Fleet, task string, n int) []record.RunID {
	t.Helper()
	base := time.Now().UTC().Add(-time.Duration(n) * time.Second)
	var ids []record.RunID
	var ops []clientv3.Op
	flush := func() {
		_, err := f.cli.Txn(context.Background()).Then(ops...).Commit()
		require.NoError(t, err)
		ops = ops[:0]
	}
	for i := range n {
		at := base.Add(time.Duration(i) * time.Second)
		code := 0
		r := &record.Run{Version: record.RecordVersion, RunID: record.NewRunID(at), Task: task, State: record.Succeeded,
			Command: []string{"true"}, Host: "h9", CreatedAt: at, StartedAt: &at, FinishedAt: &at, ExitCode: &code}
		b, err := r.Encode()
		require.NoError(t, err)
		if len(ops)+2 > etcdMaxTxnOps {
			flush()
		}
		ops = append(ops, f.k.finalOps(r, b)...)
		ids = append(ids, r.RunID)
	}
	flush()
	return ids
}

// etcd's own limits (the test server keeps its defaults): nothing crew
// reads or writes may scale with the history in one transaction, so a
// task with more finished runs than a transaction may hold operations
// keeps working: status, history, resolving the task (crew wait TASK,
// crew stop TASK).
func TestHistoryBeyondOneTransaction(t *testing.T) {
	f := open(t)
	d := over(f)
	ids := putFinished(t, f, "many", etcdMaxTxnOps+70)
	newest := ids[len(ids)-1]

	snap, err := d.Status(vocab.StatusQuery{Task: "many"})
	require.NoError(t, err)
	require.NotEmpty(t, snap.Finished)
	assert.Equal(t, newest, snap.Finished[0].RunID)

	h, err := d.History(vocab.HistoryQuery{})
	require.NoError(t, err)
	require.Len(t, h.Runs, len(ids), "every finished run, read in transactions etcd accepts")
	assert.Equal(t, newest, h.Runs[0].RunID)
	assert.Equal(t, ids[0], h.Runs[len(h.Runs)-1].RunID)

	h, err = d.History(vocab.HistoryQuery{Task: "many", Limit: etcdMaxTxnOps + 1})
	require.NoError(t, err)
	assert.Len(t, h.Runs, etcdMaxTxnOps+1)

	got, err := d.Resolve("many")
	require.NoError(t, err)
	assert.Equal(t, newest, got, "a task names its newest run (crew wait TASK, crew stop TASK)")
	rec, err := d.WaitRun(context.Background(), got)
	require.NoError(t, err)
	assert.Equal(t, record.Succeeded, rec.State)
}

func clientv3WithPrefix() []clientv3.OpOption { return []clientv3.OpOption{clientv3.WithPrefix()} }
