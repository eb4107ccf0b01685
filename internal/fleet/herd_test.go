//go:build etcd

package fleet

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// enqueue puts a waiting start of task in line, as crew start --wait does,
// and returns its waiter.
func enqueue(t *testing.T, f *Fleet, task string) *waiter {
	t.Helper()
	ctx := context.Background()
	st, err := f.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	sec, err := st.LockAdmission(ctx, 5*time.Second)
	require.NoError(t, err)
	defer sec.Release()
	now := time.Now().UTC()
	w, err := sec.Enqueue(&record.Ticket{Version: record.TicketVersion, RunID: record.NewRunID(now), Task: task,
		Command: []string{"true"}, Host: "h1", PID: os.Getpid(), CreatedAt: now})
	require.NoError(t, err)
	return w.(*waiter)
}

// The herd (issue 26): a finishing run rings the waiter its slot can serve
// (the head of the line, at a cap of 1), and no other waiter is woken:
// every waiter used to be told of every delete under the prefix, and each
// read the store to see whether it might go.
func TestAFinishWakesOnlyTheWaitersItsSlotCanServe(t *testing.T) {
	f := open(t)
	d := over(f)
	_, err := d.Admin().Init(1, true, nil, 5*time.Second)
	require.NoError(t, err)
	gate := t.TempDir() + "/gate"
	done := make(chan error, 1)
	go func() {
		_, err := d.Start(startReq("holder", "sh", "-c", "while [ ! -e "+gate+" ]; do sleep 0.02; done"))
		done <- err
	}()
	require.Eventually(t, func() bool {
		snap, err := d.Status(vocab.StatusQuery{})
		return err == nil && snap.SlotsInUse == 1
	}, 10*time.Second, 20*time.Millisecond)
	var ws []*waiter
	for i := range 4 {
		ws = append(ws, enqueue(t, f, fmt.Sprint("w", i)))
	}

	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	require.NoError(t, <-done) // final, its slot free, its waiters rung
	// A barrier: every waiter is told of a config write, after whatever
	// the finish told it.
	cfg, _, err := f.LoadConfig()
	require.NoError(t, err)
	b, err := cfg.Encode()
	require.NoError(t, err)
	_, err = f.cli.Put(context.Background(), f.k.config(), string(b))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, w := range ws {
			if w.changes.Load() == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	for i, w := range ws[1:] {
		assert.EqualValues(t, 1, w.changes.Load(), "waiter %d behind the head was told only of the config write", i+1)
	}
	select {
	case <-ws[0].Rung():
	case <-time.After(10 * time.Second):
		t.Fatal("the head of the line was not rung for the freed slot")
	}
}

// What nobody announces still reaches every waiter: a run whose lease
// expired (its owner key gone, its record still active) frees its slot
// without a word, so each waiter is told to look.
func TestALeaseThatExpiresTellsEveryWaiter(t *testing.T) {
	f := open(t)
	d := over(f)
	_, err := d.Admin().Init(1, true, nil, 5*time.Second)
	require.NoError(t, err)
	r := putActive(t, f, "holder", record.Running)
	ctx := context.Background()
	l, err := f.cli.Grant(ctx, 30)
	require.NoError(t, err)
	_, err = f.cli.Put(ctx, f.k.owner(r.RunID), "{}", clientv3.WithLease(l.ID))
	require.NoError(t, err)
	var ws []*waiter
	for i := range 3 {
		ws = append(ws, enqueue(t, f, fmt.Sprint("w", i)))
	}
	_, err = f.cli.Revoke(ctx, l.ID) // as etcd does when the lease expires
	require.NoError(t, err)
	for i, w := range ws {
		select {
		case <-w.Changed():
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d was not told of the slot freed without a word", i)
		}
	}
}
