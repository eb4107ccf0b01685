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

// What nobody announces reaches the head of the line, for every waiter: a
// run whose lease expired (its owner key gone, its record still active)
// frees its slot without a word. The head is told to look (and, in
// dispatch, rings whoever may go); the waiters behind it are not woken.
func TestALeaseThatExpiresTellsTheHeadOfTheLine(t *testing.T) {
	f, lease, ws := threeInLine(t)
	_, err := f.cli.Revoke(context.Background(), lease) // as etcd does when the lease expires
	require.NoError(t, err)
	select {
	case <-ws[0].Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("the head of the line was not told of the slot freed without a word")
	}
	barrier(t, f, ws)
	for i, w := range ws[1:] {
		assert.False(t, w.Sentinel(), "waiter %d behind the head", i+1)
		assert.EqualValues(t, 1, w.changes.Load(), "waiter %d behind the head was told only of the config write", i+1)
	}
}

// A waiter that moves up to the head of the line (the one ahead was
// admitted, or left) watches for the line from then on, and is told to
// look once: a slot freed without a word while the line moved may have
// been noticed by nobody.
func TestAWaiterThatMovesUpWatchesForTheLine(t *testing.T) {
	f, lease, ws := threeInLine(t)
	assert.False(t, ws[1].Sentinel())
	ws[0].Remove()
	require.Eventually(t, func() bool { return ws[1].Sentinel() }, 10*time.Second, 10*time.Millisecond)
	select {
	case <-ws[1].Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter that moved up was not told to look")
	}
	assert.False(t, ws[2].Sentinel(), "the waiter behind the new head")
	_, err := f.cli.Revoke(context.Background(), lease)
	require.NoError(t, err)
	select {
	case <-ws[1].Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("the new head was not told of the slot freed without a word")
	}
}

// The head of the line rings the waiters a slot freed without a word can
// serve when it cannot go itself: here the head waits for pool a, and the
// run whose lease expires held pool b's only slot, which the waiter behind
// it wants. It is admitted well before any waiter's poll (30 s) would
// have looked.
func TestTheHeadRingsTheWaiterASilentlyFreedSlotServes(t *testing.T) {
	f := open(t)
	d := over(f)
	_, err := d.Admin().Init(2, true, []vocab.PoolChange{{Name: "a", Max: 1}, {Name: "b", Max: 1}}, 5*time.Second)
	require.NoError(t, err)
	leaseA := putLeased(t, f, "holder-a", "a")
	leaseB := putLeased(t, f, "holder-b", "b")
	start := func(task, pool string) <-chan error {
		req := startReq(task, "true")
		req.Wait, req.Pool = true, pool
		done := make(chan error, 1)
		go func() {
			_, err := d.Start(req)
			done <- err
		}()
		return done
	}
	inLine := func(n int) func() bool {
		return func() bool {
			ts, err := queue{f}.ListTickets()
			return err == nil && len(ts) == n
		}
	}
	doneA := start("wa", "a")
	require.Eventually(t, inLine(1), 10*time.Second, 10*time.Millisecond)
	doneB := start("wb", "b")
	require.Eventually(t, inLine(2), 10*time.Second, 10*time.Millisecond)

	_, err = f.cli.Revoke(context.Background(), leaseB)
	require.NoError(t, err)
	select {
	case err := <-doneB:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter for pool b was not let into the slot freed without a word")
	}
	_, err = f.cli.Revoke(context.Background(), leaseA)
	require.NoError(t, err)
	select {
	case err := <-doneA:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("the head of the line was not let in")
	}
}

// putLeased puts an active run of task (in pool, if any) whose owner key is
// on a lease of the test's, as a living supervisor's is; revoking the lease
// is that run's lease expiring.
func putLeased(t *testing.T, f *Fleet, task, pool string) clientv3.LeaseID {
	t.Helper()
	now := time.Now().UTC()
	r := &record.Run{Version: record.RecordVersion, RunID: record.NewRunID(now), Task: task, Pool: pool, State: record.Running,
		Command: []string{"true"}, Host: "h9", CreatedAt: now, SupervisorPID: 4711}
	b, err := r.Encode()
	require.NoError(t, err)
	ctx := context.Background()
	l, err := f.cli.Grant(ctx, 60)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = f.cli.Revoke(context.Background(), l.ID) })
	_, err = f.cli.Txn(ctx).Then(clientv3.OpPut(f.k.active(r.RunID), string(b)),
		clientv3.OpPut(f.k.owner(r.RunID), "{}", clientv3.WithLease(l.ID))).Commit()
	require.NoError(t, err)
	return l.ID
}

// barrier writes the config, which every waiter is told of, and waits
// until each was: whatever was told before it has been told.
func barrier(t *testing.T, f *Fleet, ws []*waiter) {
	t.Helper()
	before := make([]int64, len(ws))
	for i, w := range ws {
		before[i] = w.changes.Load()
	}
	cfg, _, err := f.LoadConfig()
	require.NoError(t, err)
	b, err := cfg.Encode()
	require.NoError(t, err)
	_, err = f.cli.Put(context.Background(), f.k.config(), string(b))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for i, w := range ws {
			if w.changes.Load() == before[i] {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
}

// A key in the queue that crew did not write (on no lease: planted, or
// copied by etcdctl make-mirror) never goes: a waiter behind it does not
// wait for it to, but stands at the head of the line.
func TestAForeignKeyAheadDoesNotHideTheLine(t *testing.T) {
	f := open(t)
	d := over(f)
	_, err := d.Admin().Init(1, true, nil, 5*time.Second)
	require.NoError(t, err)
	now := time.Now().UTC()
	tk := &record.Ticket{Version: record.TicketVersion, RunID: record.NewRunID(now), Task: "planted",
		Command: []string{"true"}, Host: "h9", PID: 4711, CreatedAt: now}
	b, err := tk.Encode()
	require.NoError(t, err)
	_, err = f.cli.Put(context.Background(), f.k.ticket(tk.RunID), string(b))
	require.NoError(t, err)
	w := enqueue(t, f, "w")
	require.Eventually(t, w.Sentinel, 10*time.Second, 10*time.Millisecond)
}

// A start that leaves the line without a run (killed as it was rung, its
// ticket gone with its lease; or it gave up) may leave a slot it was rung
// for unused, and nobody rings again: the waiter behind it is told to
// look, and is the one to ring whoever may go, even if it is not the head.
func TestAStartThatLeavesTheLineWithoutARunTellsTheOneBehind(t *testing.T) {
	_, _, ws := threeInLine(t)
	ws[1].Remove()
	select {
	case <-ws[2].Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind a start that left without a run was not told")
	}
	assert.True(t, ws[2].Sentinel(), "it rings for the start that left")
	assert.False(t, ws[2].Sentinel(), "once")
	assert.True(t, ws[0].Sentinel(), "the head is still the head")
}

// threeInLine is a store at cap 1 whose slot a run holds on a lease of the
// test's (revoking it is that run's lease expiring), and three waiters in
// line behind it, the first of them at the head.
func threeInLine(t *testing.T) (*Fleet, clientv3.LeaseID, []*waiter) {
	t.Helper()
	f := open(t)
	_, err := over(f).Admin().Init(1, true, nil, 5*time.Second)
	require.NoError(t, err)
	lease := putLeased(t, f, "holder", "")
	var ws []*waiter
	for i := range 3 {
		ws = append(ws, enqueue(t, f, fmt.Sprint("w", i)))
	}
	require.Eventually(t, func() bool { return ws[0].Sentinel() }, 10*time.Second, 10*time.Millisecond)
	return f, lease, ws
}
