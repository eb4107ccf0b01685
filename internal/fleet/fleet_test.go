//go:build etcd

package fleet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/leaseguard"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/retention"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// endpoint is the client URL of the single-member etcd TestMain runs.
var endpoint string

func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == GuardArg {
		os.Exit(leaseguard.Main()) // Start runs this binary as its guard
	}
	dir, err := os.MkdirTemp("", "fleet-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	e, err := startEtcd(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start etcd:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	e.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startEtcd(dir string) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.LogLevel = "fatal" // "error" still prints etcd's complaints about its own shutdown
	client, err := freePort()
	if err != nil {
		return nil, err
	}
	peer, err := freePort()
	if err != nil {
		return nil, err
	}
	cu, pu := url.URL{Scheme: "http", Host: client}, url.URL{Scheme: "http", Host: peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	// etcd's own limits, as a stock server has them (crew must work
	// within them): set here so that no default of the embedded server's
	// can change what the tests check.
	cfg.MaxTxnOps, cfg.MaxRequestBytes = etcdMaxTxnOps, etcdMaxRequestBytes
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd not ready after 30s")
	}
	endpoint = client
	return e, nil
}

// etcd's defaults for --max-txn-ops and --max-request-bytes.
const (
	etcdMaxTxnOps       = 128
	etcdMaxRequestBytes = 1536 * 1024
)

var prefixes atomic.Int64

// open connects to a fresh prefix, as host h1.
func open(t *testing.T) *Fleet { return openAs(t, "h1", "") }

// openAs connects to the store of url (a fresh prefix if empty) as host.
func openAs(t *testing.T, host, url string) *Fleet {
	t.Helper()
	if url == "" {
		url = fmt.Sprintf("etcd://%s/test-%d-%s", endpoint, prefixes.Add(1), strings.ReplaceAll(t.Name(), "/", "-"))
	}
	f, err := Open(url, Options{Host: host, LeaseTTL: MinLeaseTTL, Logs: runstore.New(t.TempDir())})
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// over is crew's one orchestration on the etcd store f.
func over(f *Fleet) *dispatch.Dispatcher { return dispatch.Over(f, f.logs, f.Host()) }

func TestParseURL(t *testing.T) {
	loc, err := ParseURL("etcd://a:1,b:2/team/ci/")
	require.NoError(t, err)
	assert.Equal(t, []string{"http://a:1", "http://b:2"}, loc.Endpoints)
	assert.Equal(t, "/team/ci", loc.Prefix)
	loc, err = ParseURL("etcd://[::1]:2379,etcd-1.example:65535/x")
	require.NoError(t, err)
	assert.Equal(t, []string{"http://[::1]:2379", "http://etcd-1.example:65535"}, loc.Endpoints)
	for in, want := range map[string]string{
		"http://a:1/x":    "not an etcd store URL",
		"etcd://a:1":      "give a key prefix",
		"etcd://a:1/":     "give a key prefix",
		"etcd://a/x":      `endpoint "a" is not HOST:PORT`,
		"etcd://a:1/x//y": "empty, . or .. segment",
		"etcd://a:1/../y": "empty, . or .. segment",
		// What the etcd client would only fail to dial, again and again.
		"etcd://127.0.0.1:abc/x":   `endpoint "127.0.0.1:abc" is not HOST:PORT: the port "abc" is not a number from 1 to 65535`,
		"etcd://127.0.0.1:99999/x": `the port "99999" is not a number from 1 to 65535`,
		"etcd://127.0.0.1:0/x":     `the port "0" is not a number`,
		"etcd://a:1,b:+2/x":        `the port "+2" is not a number`,
		"etcd://:2379/x":           `endpoint ":2379" is not HOST:PORT`,
		"etcd://a:1,/x":            `endpoint "" is not HOST:PORT`,
		"etcd://me@a:1/x":          `endpoint "me@a:1" carries credentials`,
		"etcd://a b:1/x":           `"a b" is not a host name or address`,
		// Neither may end up in the prefix unseen.
		"etcd://a:1/x?dial-timeout=1s": `takes no ?query or #fragment ("?dial-timeout=1s")`,
		"etcd://a:1/x#y":               `takes no ?query or #fragment ("#y")`,
		"etcd://a:1?x/y":               `takes no ?query or #fragment`,
	} {
		_, err := ParseURL(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), want, in)
	}
}

// putActive writes an active record of a run whose owner key does not
// exist (its lease is gone), as a crashed supervisor leaves it.
func putActive(t *testing.T, f *Fleet, task string, st record.State) *record.Run {
	t.Helper()
	now := time.Now().UTC()
	r := &record.Run{Version: record.RecordVersion, RunID: record.NewRunID(now), Task: task, State: st,
		Command: []string{"true"}, Host: "h9", CreatedAt: now, SupervisorPID: 4711}
	b, err := r.Encode()
	require.NoError(t, err)
	_, err = f.cli.Put(context.Background(), f.k.active(r.RunID), string(b))
	require.NoError(t, err)
	return r
}

func startReq(task string, cmd ...string) vocab.StartRequest {
	return vocab.StartRequest{AdmitRequest: vocab.AdmitRequest{Task: task, Command: cmd, Dir: "/",
		LockTimeout: 5 * time.Second}, Grace: time.Second, Env: os.Environ()}
}

func TestRecoverFinalizesDeadRunsAndConverges(t *testing.T) {
	f := open(t)
	d := over(f)
	dead := putActive(t, f, "nightly", record.Running)
	rep, err := d.Admin().Recover(dispatch.RecoverOptions{})
	require.NoError(t, err)
	require.Len(t, rep.Items, 1)
	assert.Equal(t, vocab.Finalized, rep.Items[0].Outcome)
	assert.Contains(t, rep.Items[0].Reason, "owner process 4711 on host h9 lost its lease")

	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	assert.Empty(t, snap.Active)
	require.Len(t, snap.Finished, 1)
	assert.Equal(t, dead.RunID, snap.Finished[0].RunID)
	assert.Equal(t, record.Interrupted, snap.Finished[0].State)
	assert.Contains(t, snap.Finished[0].Reason, "exit status unknown")

	rep, err = d.Admin().Recover(dispatch.RecoverOptions{})
	require.NoError(t, err)
	assert.Empty(t, rep.Items, "a second pass has nothing to do")
}

func TestRecoverDryRunChangesNothing(t *testing.T) {
	f := open(t)
	d := over(f)
	putActive(t, f, "a", record.Provisioning)
	rep, err := d.Admin().Recover(dispatch.RecoverOptions{DryRun: true})
	require.NoError(t, err)
	require.Len(t, rep.Items, 1)
	assert.Equal(t, vocab.Finalized, rep.Items[0].Outcome)
	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	assert.Len(t, snap.Active, 1)
}

func TestRecoverQuarantinesUnreadableRecords(t *testing.T) {
	f := open(t)
	d := over(f)
	key := f.k.active(record.NewRunID(time.Now()))
	_, err := f.cli.Put(context.Background(), key, "{not json")
	require.NoError(t, err)
	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	require.Len(t, snap.Problems, 1)
	assert.False(t, snap.Problems[0].HoldsSlot, "no owner key: holds no slot")

	rep, err := d.Admin().Recover(dispatch.RecoverOptions{})
	require.NoError(t, err)
	require.Len(t, rep.Items, 1)
	assert.Equal(t, vocab.Quarantined, rep.Items[0].Outcome)
	got, err := f.cli.Get(context.Background(), f.k.quarantinePrefix()+strings.TrimPrefix(key, f.k.p+"/"))
	require.NoError(t, err)
	require.Len(t, got.Kvs, 1)
	assert.Equal(t, "{not json", string(got.Kvs[0].Value))
}

// The fence of a finalization: a run whose owner key exists (a living
// lease) is left alone; once the lease is gone, it is finalized.
func TestFinalizeDeadIsFenced(t *testing.T) {
	f := open(t)
	r := putActive(t, f, "a", record.Running)
	ctx := context.Background()
	l, err := f.cli.Grant(ctx, 10)
	require.NoError(t, err)
	_, err = f.cli.Put(ctx, f.k.owner(r.RunID), "{}", clientv3.WithLease(l.ID))
	require.NoError(t, err)
	outcome, _, err := runs{f}.FinalizeDead(r.RunID, time.Now())
	require.NoError(t, err)
	assert.Equal(t, backend.OwnerBusy, outcome)

	_, err = f.cli.Revoke(ctx, l.ID)
	require.NoError(t, err)
	outcome, got, err := runs{f}.FinalizeDead(r.RunID, time.Now())
	require.NoError(t, err)
	assert.Equal(t, backend.Reaped, outcome)
	assert.Equal(t, record.Interrupted, got.State)
	outcome, _, err = runs{f}.FinalizeDead(r.RunID, time.Now())
	require.NoError(t, err)
	assert.Equal(t, backend.AlreadyDone, outcome)
}

// A start whose lease expired between its read and its reservation
// writes nothing: the owner key is put on that lease, in the same
// transaction.
func TestReserveOnAnExpiredLeaseWritesNothing(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	st, err := f.Begin(ctx)
	require.NoError(t, err)
	defer st.Close()
	sec, err := st.LockAdmission(ctx, 5*time.Second)
	require.NoError(t, err)
	// The lease ends (etcd, on its expiry).
	_, err = f.cli.Revoke(ctx, st.(*starter).lease.id)
	require.NoError(t, err)
	now := time.Now().UTC()
	_, err = sec.Reserve(&record.Run{Version: record.RecordVersion, RunID: record.NewRunID(now), Task: "a",
		State: record.Provisioning, Command: []string{"true"}, CreatedAt: now})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "this start's lease of 2s expired; nothing was written")
	snap, err := over(f).Status(vocab.StatusQuery{})
	require.NoError(t, err)
	assert.Empty(t, snap.Active, "nothing was written")
}

func TestLeaseDeadlineIsBeforeItsExpiry(t *testing.T) {
	f := open(t)
	before := leaseguard.Monotonic()
	l, err := f.grantBy(3*time.Second, time.Time{}, f.opTimeout)
	require.NoError(t, err)
	defer l.release()
	d := l.deadline()
	assert.Equal(t, 3*time.Second, l.ttl)
	// Sent after before, so valid until at least before+TTL; the
	// deadline is a margin earlier than that bound.
	assert.Less(t, d, before+3*time.Second)
	assert.Greater(t, d, before+3*time.Second-time.Second)
	assert.False(t, l.lost())
}

// TestNoGuardOnAStaleLease: an attempt starts only on a lease certainly
// valid for longer than its launch takes (half the TTL before the
// command's deadline): on one that went unrenewed, the guard's deadline
// could pass while the command is being started.
func TestNoGuardOnAStaleLease(t *testing.T) {
	f := open(t)
	l, err := f.grantBy(3*time.Second, time.Time{}, f.opTimeout)
	require.NoError(t, err)
	l.releaseOnce.Do(func() { close(l.stop) }) // no renewals from now on: etcd cut off
	<-l.done
	defer f.cli.Revoke(context.Background(), l.id)

	require.True(t, l.Fresh(), "a lease just granted is fresh")
	g, err := l.Guard()
	require.NoError(t, err)
	require.NoError(t, g.End())

	// Still valid by the monotonic clock, but its command's deadline is
	// less than half the TTL away.
	l.mu.Lock()
	l.validUntil = leaseguard.Monotonic() + l.ttl/2
	l.mu.Unlock()
	assert.False(t, l.hasExpired())
	assert.False(t, l.Fresh())
	g, err = l.Guard()
	if g != nil {
		_ = g.End()
	}
	require.Error(t, err, "a guard started on a lease that could run out during the launch")
	assert.Contains(t, err.Error(), "the run's lease of 3s was last renewed")
	assert.Contains(t, err.Error(), "no attempt starts on a lease that could run out while its command is being started")
}

func TestLeaseNotFoundMarksItLost(t *testing.T) {
	f := open(t)
	l, err := f.grantBy(MinLeaseTTL, time.Time{}, f.opTimeout)
	require.NoError(t, err)
	_, err = f.cli.Revoke(context.Background(), l.id)
	require.NoError(t, err)
	select {
	case <-l.expired:
	case <-time.After(5 * time.Second):
		t.Fatal("a revoked lease was not noticed")
	}
	assert.True(t, l.lost())
	l.release()
}

func TestStartRecordsTheOutcome(t *testing.T) {
	f := open(t)
	d := over(f)
	_, err := d.Admin().Init(1, true, nil, 5*time.Second)
	require.NoError(t, err)
	id, err := d.Start(startReq("a", "sh", "-c", "exit 7"))
	var exited *vocab.ExitError
	require.ErrorAs(t, err, &exited)
	assert.Equal(t, 7, exited.Code)
	snap, err := d.Status(vocab.StatusQuery{Task: "a"})
	require.NoError(t, err)
	require.Len(t, snap.Finished, 1)
	got := snap.Finished[0]
	assert.Equal(t, id, got.RunID)
	assert.Equal(t, record.Failed, got.State)
	assert.Equal(t, 7, *got.ExitCode)
	assert.Equal(t, "h1", got.Host)
	assert.Positive(t, got.PGID)
	started := slices.IndexFunc(got.Events, func(e record.Event) bool { return strings.Contains(e.What, "led by its lease guard") })
	assert.GreaterOrEqual(t, started, 0, "the start names the lease guard: %v", got.Events)

	_, err = d.Start(startReq("b", "no-such-command-here"))
	var launch *vocab.LaunchError
	require.ErrorAs(t, err, &launch)
	assert.True(t, launch.NotFound)
}

func TestStartRefusesAtTheCap(t *testing.T) {
	f := open(t)
	d := over(f)
	_, err := d.Admin().Init(1, true, nil, 5*time.Second)
	require.NoError(t, err)
	gate := t.TempDir() + "/gate"
	done := make(chan error, 1)
	go func() {
		_, err := d.Start(startReq("a", "sh", "-c", "while [ ! -e "+gate+" ]; do sleep 0.02; done"))
		done <- err
	}()
	require.Eventually(t, func() bool {
		snap, err := d.Status(vocab.StatusQuery{})
		return err == nil && snap.SlotsInUse == 1
	}, 10*time.Second, 20*time.Millisecond)

	_, err = d.Start(startReq("b", "true"))
	var refused *vocab.RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, vocab.SlotsBusy, refused.Kind)
	_, err = d.Start(startReq("a", "true"))
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, vocab.TaskActive, refused.Kind)

	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	require.NoError(t, <-done)
}

func TestHistoryIsNewestFinishFirstAndFilters(t *testing.T) {
	d := over(open(t))
	for _, c := range []string{"exit 0", "exit 3", "exit 0"} {
		_, _ = d.Start(startReq("t", "sh", "-c", c))
	}
	h, err := d.History(vocab.HistoryQuery{})
	require.NoError(t, err)
	require.Len(t, h.Runs, 3)
	for i := 1; i < len(h.Runs); i++ {
		assert.False(t, h.Runs[i].FinishedAt.After(*h.Runs[i-1].FinishedAt), "newest finish first")
	}
	h, err = d.History(vocab.HistoryQuery{Failed: true})
	require.NoError(t, err)
	require.Len(t, h.Runs, 1)
	assert.Equal(t, 3, *h.Runs[0].ExitCode)
	h, err = d.History(vocab.HistoryQuery{Limit: 2})
	require.NoError(t, err)
	assert.Len(t, h.Runs, 2)
	h, err = d.History(vocab.HistoryQuery{Task: "other"})
	require.NoError(t, err)
	assert.Empty(t, h.Runs)
}

func TestPruneKeepsTheNewestAndTheYoung(t *testing.T) {
	d := over(open(t))
	for range 3 {
		_, err := d.Start(startReq("t", "true"))
		require.NoError(t, err)
	}
	keep := retention.Policy{KeepNewest: 1, OlderThan: retention.NoAgeRule}
	rep, err := d.Admin().Prune(dispatch.PruneOptions{Policy: keep, DryRun: true})
	require.NoError(t, err)
	assert.Len(t, rep.Removed, 2)
	h, _ := d.History(vocab.HistoryQuery{})
	assert.Len(t, h.Runs, 3, "a dry run removes nothing")

	young := retention.Policy{KeepNewest: 0, OlderThan: time.Hour}
	rep, err = d.Admin().Prune(dispatch.PruneOptions{Policy: young})
	require.NoError(t, err)
	assert.Empty(t, rep.Removed, "all finished within the hour")
	assert.Equal(t, 3, rep.Kept)

	rep, err = d.Admin().Prune(dispatch.PruneOptions{Policy: keep})
	require.NoError(t, err)
	assert.Len(t, rep.Removed, 2)
	h, _ = d.History(vocab.HistoryQuery{})
	require.Len(t, h.Runs, 1)
	_, err = d.Run(rep.Removed[0].RunID)
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// crew stop from another host reaches the supervisor through etcd, and
// WaitRun returns the final record.
func TestStopFromAnotherHost(t *testing.T) {
	f := open(t)
	d := over(f)
	done := make(chan error, 1)
	go func() {
		_, err := d.Start(startReq("long", "sleep", "30"))
		done <- err
	}()
	var id record.RunID
	require.Eventually(t, func() bool {
		snap, err := d.Status(vocab.StatusQuery{Task: "long"})
		if err == nil && len(snap.Active) == 1 && snap.Active[0].State == record.Running {
			id = snap.Active[0].RunID
			return true
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)

	other := over(openAs(t, "h2", f.Loc.URL))
	got, err := other.Resolve("long")
	require.NoError(t, err)
	assert.Equal(t, id, got)
	rec, err := other.Stop(id, vocab.StopOptions{Signal: syscall.SIGTERM, Grace: time.Second})
	require.NoError(t, err)
	assert.Equal(t, record.Stopped, rec.State)
	assert.Contains(t, rec.Reason, "stopped by crew stop")
	var exited *vocab.ExitError
	require.ErrorAs(t, <-done, &exited)
	assert.Equal(t, 128+int(syscall.SIGTERM), exited.Code)

	rec, err = other.WaitRun(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, record.Stopped, rec.State)
}

func TestFinishingPrunesLazilyUnderTheConfiguredRetention(t *testing.T) {
	d := over(open(t))
	_, err := d.Admin().Init(4, true, nil, 5*time.Second, vocab.SetRetain(2))
	require.NoError(t, err)
	var ids []record.RunID
	for range 4 {
		id, err := d.Start(startReq("t", "true"))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	h, err := d.History(vocab.HistoryQuery{})
	require.NoError(t, err)
	require.Len(t, h.Runs, 2, "each finish removes what the retention lets go")
	assert.Equal(t, ids[3], h.Runs[0].RunID)
	assert.Equal(t, ids[2], h.Runs[1].RunID)
	_, err = d.Run(ids[0])
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestResolveShortIDs(t *testing.T) {
	d := over(open(t))
	id, err := d.Start(startReq("short", "true"))
	require.NoError(t, err)
	got, err := d.Resolve(id.Short())
	require.NoError(t, err)
	assert.Equal(t, id, got)
	got, err = d.Resolve("short")
	require.NoError(t, err)
	assert.Equal(t, id, got, "a task names its newest run")
	_, err = d.Resolve("deadbeef")
	var nf *vocab.NotFoundError
	require.ErrorAs(t, err, &nf, "neither a run's short id nor a task")
}

func TestStopRefusesSIGSTOP(t *testing.T) {
	f := open(t)
	r := putActive(t, f, "a", record.Running)
	_, err := over(f).Stop(r.RunID, vocab.StopOptions{Signal: syscall.SIGSTOP, Grace: time.Second})
	var refused *vocab.RefusedOnStoreError
	require.ErrorAs(t, err, &refused)
	assert.Contains(t, err.Error(), "crew stop --signal SIGSTOP: not available on etcd store "+f.Loc.URL+": it would freeze the run's lease guard")
}

// The run's log is kept on this host, capped as on a state root, and
// --tag prefixes crew's copy of the output only.
func TestOutputIsLoggedCappedAndTagged(t *testing.T) {
	f := open(t)
	var out bytes.Buffer
	req := startReq("chatty", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done")
	req.Stdout, req.Stderr, req.Tag, req.LogMax = &out, io.Discard, true, record.MinLogMax
	d := over(f)
	id, err := d.Start(req)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(out.String(), "chatty\tline-0\n"), "crew's copy is tagged")
	assert.Contains(t, out.String(), "chatty\tline-19999\n", "and complete")

	var log bytes.Buffer
	r := d.OpenLog(id)
	_, err = r.Copy(&log)
	require.NoError(t, r.Close())
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(log.String(), "line-0\n"), "the log is untagged, from the first line")
	assert.True(t, strings.HasSuffix(log.String(), "line-19999\n"), "and keeps the newest output")
	assert.Less(t, log.Len(), 2*int(record.MinLogMax), "the cap holds: %d bytes", log.Len())
	v, err := d.Run(id)
	require.NoError(t, err)
	assert.Equal(t, int64(record.MinLogMax), v.LogMax)
}
