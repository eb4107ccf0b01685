//go:build etcd

package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// The optimistic admission (issue 26): a section reads at a revision and
// commits only if nothing its decision read has changed since.

// sectionOf begins a start on f and reads the store for its decision.
func sectionOf(t *testing.T, f *Fleet) backend.Section {
	t.Helper()
	st, err := f.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(st.Close)
	sec, err := st.LockAdmission(context.Background(), 5*time.Second)
	require.NoError(t, err)
	return sec
}

func provisioning(task string) *record.Run {
	now := time.Now().UTC()
	return &record.Run{Version: record.RecordVersion, RunID: record.NewRunID(now), Task: task, State: record.Provisioning,
		Command: []string{"true"}, Host: "h1", SupervisorPID: os.Getpid(), CreatedAt: now}
}

func ticketOf(task, host string) *record.Ticket {
	now := time.Now().UTC()
	return &record.Ticket{Version: record.TicketVersion, RunID: record.NewRunID(now), Task: task, Command: []string{"true"},
		Host: host, PID: os.Getpid(), CreatedAt: now}
}

func activeTasks(t *testing.T, f *Fleet) []string {
	t.Helper()
	snap, err := over(f).Status(vocab.StatusQuery{})
	require.NoError(t, err)
	var tasks []string
	for _, r := range snap.Active {
		tasks = append(tasks, r.Task)
	}
	return tasks
}

// wantConflict checks that err is a conflict, and returns it.
func wantConflict(t *testing.T, err error) *backend.ConflictError {
	t.Helper()
	require.ErrorIs(t, err, backend.ErrConflict)
	var c *backend.ConflictError
	require.ErrorAs(t, err, &c)
	return c
}

// A start that decided on a snapshot in which another start then reserved
// a run writes nothing, says who committed first, and commits once it has
// read again: the forced interleaving of two racing hosts.
func TestAReservationAfterTheReadConflicts(t *testing.T) {
	f := open(t)
	f2 := openAs(t, "h2", f.Loc.URL)
	first := sectionOf(t, f)
	second := sectionOf(t, f2)
	_, err := second.Reserve(provisioning("b"))
	require.NoError(t, err)

	_, err = first.Reserve(provisioning("a"))
	c := wantConflict(t, err)
	assert.Contains(t, c.Change, "a run was reserved ("+f.k.activePrefix())
	assert.Equal(t, vocab.Holder{PID: os.Getpid(), Host: "h1"}, vocab.Holder{PID: c.By.PID, Host: c.By.Host},
		"the reserving process, by its record")
	assert.Equal(t, []string{"b"}, activeTasks(t, f), "the loser wrote nothing")
	assert.EqualValues(t, 1, f.conflicts.Load())

	_, err = sectionOf(t, f).Reserve(provisioning("a"))
	require.NoError(t, err, "read again, it commits")
	assert.ElementsMatch(t, []string{"a", "b"}, activeTasks(t, f))
}

// A ticket that joined the queue after the read conflicts: the start
// might have jumped it. A ticket joins the queue whatever was written
// since its start's read: a start not admitted on an older snapshot is
// not admitted on a newer one with more runs or tickets in it either.
func TestATicketAfterTheReadConflicts(t *testing.T) {
	f := open(t)
	f2 := openAs(t, "h2", f.Loc.URL)
	sec := sectionOf(t, f)
	_, err := sectionOf(t, f2).Enqueue(ticketOf("w", "h2"))
	require.NoError(t, err)
	_, err = sec.Reserve(provisioning("a"))
	c := wantConflict(t, err)
	assert.Contains(t, c.Change, "a start joined the queue ("+f.k.queuePrefix())
	assert.Equal(t, "h2", c.By.Host)
	assert.Empty(t, activeTasks(t, f))

	w, err := sec.Enqueue(ticketOf("a", "h1"))
	require.NoError(t, err, "a start not admitted joins the line behind it")
	snap, err := over(f).Status(vocab.StatusQuery{})
	require.NoError(t, err)
	require.Len(t, snap.Queue, 2)
	assert.Equal(t, "w", snap.Queue[0].Task)
	assert.Equal(t, w.ID(), snap.Queue[1].RunID, "in the order the tickets were written")
}

// A config written after the read conflicts, for a reservation and for
// another config write alike (crew init on two hosts at once).
func TestAConfigAfterTheReadConflicts(t *testing.T) {
	f := open(t)
	f2 := openAs(t, "h2", f.Loc.URL)
	sec := sectionOf(t, f)
	_, err := over(f2).Admin().Init(1, true, nil, 5*time.Second)
	require.NoError(t, err)
	c := wantConflict(t, sec.SaveConfig(record.Config{MaximumInProgress: 5}))
	assert.Contains(t, c.Change, "the config ("+f.k.config()+") was written")
	_, err = sec.Reserve(provisioning("a"))
	wantConflict(t, err)
	cfg, _, err := f.LoadConfig()
	require.NoError(t, err)
	assert.Equal(t, 1, cfg.MaximumInProgress, "the loser's config was not written")
}

// What only frees capacity, or touches what the decision does not read,
// does not conflict: a run that finished, a lease that expired, a waiter
// that left, a ring, a record written over (provisioning to running).
func TestWhatOnlyFreesCapacityDoesNotConflict(t *testing.T) {
	f := open(t)
	f2 := openAs(t, "h2", f.Loc.URL)
	ctx := context.Background()
	done := putActive(t, f, "done", record.Running)
	kept := putActive(t, f, "kept", record.Provisioning)
	l, err := f.cli.Grant(ctx, 30)
	require.NoError(t, err)
	_, err = f.cli.Put(ctx, f.k.owner(done.RunID), "{}", clientv3.WithLease(l.ID))
	require.NoError(t, err)
	wst, err := f2.Begin(ctx)
	require.NoError(t, err)
	wsec, err := wst.LockAdmission(ctx, 5*time.Second)
	require.NoError(t, err)
	rung, err := wsec.Enqueue(ticketOf("rung", "h2"))
	require.NoError(t, err)
	leaving, err := sectionOf(t, f2).Enqueue(ticketOf("leaving", "h2"))
	require.NoError(t, err)

	sec := sectionOf(t, f)
	_, err = f.cli.Delete(ctx, f.k.active(done.RunID)) // finished
	require.NoError(t, err)
	_, err = f.cli.Revoke(ctx, l.ID) // its lease ends
	require.NoError(t, err)
	leaving.Remove()
	f.Queue().Ring(rung.ID())
	kept.State = record.Running
	b, err := kept.Encode()
	require.NoError(t, err)
	_, err = f.cli.Put(ctx, f.k.active(kept.RunID), string(b))
	require.NoError(t, err)

	_, err = sec.Reserve(provisioning("a"))
	require.NoError(t, err)
	assert.EqualValues(t, 0, f.conflicts.Load())
	wst.Close()
}

// oldRelease is a crew of the previous release inside its admission
// critical section: it holds the mutex under locks/dispatch-admission/
// (concurrency.Mutex's recipe, on its lease) and its holder note.
func oldRelease(t *testing.T, f *Fleet) (unlock func()) {
	t.Helper()
	sess, err := concurrency.NewSession(f.cli, concurrency.WithTTL(10))
	require.NoError(t, err)
	mu := concurrency.NewMutex(sess, f.k.admissionLock())
	require.NoError(t, mu.Lock(context.Background()))
	note, _ := json.Marshal(holderNote{Host: "old-h", PID: 4242, Since: time.Now().UTC()})
	_, err = f.cli.Put(context.Background(), f.k.admissionHolder(), string(note), clientv3.WithLease(sess.Lease()))
	require.NoError(t, err)
	var once sync.Once
	unlock = func() { once.Do(func() { _ = mu.Unlock(context.Background()); _ = sess.Close() }) }
	t.Cleanup(unlock)
	return unlock
}

// A rollout: while a crew of the previous release holds (or waits for) its
// admission mutex, this crew commits nothing, since that crew fences its
// writes by the mutex alone and would not see ours; once it is gone, it
// commits. A key on no lease there is foreign and holds nothing off.
func TestAnEarlierReleaseHoldsCommitsOff(t *testing.T) {
	f := open(t)
	foreign := putLeaseless(t, f, f.k.admissionLock()+"/694d9a1b2c3d4e5f", "")
	_, err := sectionOf(t, f).Reserve(provisioning("foreign"))
	require.NoError(t, err, "a foreign key under the mutex's prefix holds nothing off")
	_, err = f.cli.Delete(context.Background(), foreign) // etcd's own mutex recipe, the earlier release's, would wait for it
	require.NoError(t, err)

	unlock := oldRelease(t, f)
	sec := sectionOf(t, f)
	_, err = sec.Reserve(provisioning("a"))
	c := wantConflict(t, err)
	assert.Contains(t, c.Change, "a crew of an earlier release held the admission mutex under "+f.k.admissionLock()+"/")
	assert.Equal(t, 4242, c.By.PID)
	assert.Equal(t, "old-h", c.By.Host)

	// The start of this release that keeps finding it there times out,
	// saying so.
	req := startReq("y", "true")
	req.LockTimeout = 300 * time.Millisecond
	_, err = over(f).Start(req)
	var timeout *vocab.LockTimeoutError
	require.ErrorAs(t, err, &timeout)
	assert.Greater(t, timeout.Lost, 1)
	assert.Contains(t, err.Error(), fmt.Sprintf("timed out after 300ms: admission on etcd store %s was tried %d times, "+
		"and each time another crew changed the store first (the last: a crew of an earlier release held the admission mutex under %s/",
		f.Loc.URL, timeout.Lost, f.k.admissionLock()))
	assert.Contains(t, err.Error(), "by pid 4242 on host old-h since ")
	assert.Contains(t, err.Error(), "try again, or raise --lock-timeout")

	unlock()
	_, err = sec.Reserve(provisioning("a"))
	require.NoError(t, err, "the earlier release's crew left having written nothing: the decision still stands")
}

// A storm: hosts start runs of distinct tasks all at once, each one after
// another; every start gets in within its --lock-timeout, however often it
// loses to another first. The figures say how often a start lost.
func TestEveryStartGetsInUnderAStorm(t *testing.T) {
	const hosts, each = 8, 6
	f := open(t)
	_, err := over(f).Admin().Init(hosts*each, true, nil, 5*time.Second)
	require.NoError(t, err)
	fleets := make([]*Fleet, hosts)
	for h := range fleets {
		fleets[h] = openAs(t, fmt.Sprintf("h%d", h), f.Loc.URL)
	}
	lost := make([][]int64, hosts)
	errs := make([]error, hosts)
	var wg sync.WaitGroup
	release := make(chan struct{})
	for h, hf := range fleets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			for i := range each {
				before := hf.conflicts.Load()
				res, err := over(hf).Admit(context.Background(), vocab.AdmitRequest{Task: fmt.Sprintf("t%d-%d", h, i),
					Command: []string{"true"}, Dir: "/", LockTimeout: 10 * time.Second})
				if err != nil {
					errs[h] = err
					return
				}
				res.Starter.Close()
				lost[h] = append(lost[h], hf.conflicts.Load()-before)
			}
		}()
	}
	close(release)
	wg.Wait()
	var total, most int64
	for h := range fleets {
		require.NoError(t, errs[h], "host %d", h)
		for _, n := range lost[h] {
			total += n
			most = max(most, n)
		}
	}
	t.Logf("%d starts on %d hosts: %d lost tries in all, at most %d for one start", hosts*each, hosts, total, most)
	assert.Len(t, activeTasks(t, f), hosts*each, "every start was admitted")
}

// The etcd store's config stays at version 1: state-root version 2 is how
// a local root keeps its records, and the etcd store's are unchanged, so
// crews that read only version 1 keep sharing the cluster.
func TestTheConfigInEtcdStaysVersion1(t *testing.T) {
	f := open(t)
	_, err := over(f).Admin().Init(3, true, nil, 5*time.Second)
	require.NoError(t, err)
	resp, err := f.cli.Get(context.Background(), f.k.config())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	var w struct {
		Version int `json:"version"`
	}
	require.NoError(t, json.Unmarshal(resp.Kvs[0].Value, &w))
	assert.Equal(t, 1, w.Version, "%s", resp.Kvs[0].Value)
}
