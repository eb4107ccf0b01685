//go:build etcd

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Admission on etcd is optimistic (issue 26): a start reads the store,
// decides, and commits only if no other start committed in between;
// otherwise it reads and decides again.

// fleetForcedInterleaving: the first start is held between its read and
// its commit (failpoint admission-locked) while a second one, on another
// host, is admitted to the one slot and runs. Let go, the first must find
// its read out of date, decide again and be refused: the observer never
// sees two commands at once.
func fleetForcedInterleaving(t *testing.T, c *etcdCluster) {
	admitted, most, r1 := forcedFleetRace(t, c, "")
	assert.Equal(t, 1, most, "over-admitted: the observer saw both commands at once")
	assert.Equal(t, 1, admitted, "exactly one of two racing starts is admitted")
	wantCode(t, r1, "the start held between its read and its commit", 75)
	assert.Contains(t, r1.Stderr, "not admitted: all slots are busy (1/1 in use)")
}

// fleetForcedInterleavingCatchesMissingFence proves the test above can
// fail: with the fence of the commit compiled out (admission-lock:skip),
// the same interleaving admits both, and the observer sees it.
func fleetForcedInterleavingCatchesMissingFence(t *testing.T, c *etcdCluster) {
	admitted, most, _ := forcedFleetRace(t, c, "admission-lock:skip")
	assert.Equal(t, 2, admitted, "without the fence the forced interleaving over-admits")
	assert.Equal(t, 2, most, "and the observer sees both commands at once")
}

// forcedFleetRace returns how many of the two starts were admitted, the
// most commands the observer saw at once, and the first start's result.
func forcedFleetRace(t *testing.T, c *etcdCluster, sabotage string) (int, int, result) {
	f := newEtcdFleet(t, c)
	f.initMax(1)
	inside, letGo := f.gate("first-inside")
	hold, release := f.gate("commands-run")
	rules := "CREW_FAILPOINT=admission-locked:wait:" + inside
	if sabotage != "" {
		rules += "," + sabotage
	}
	cmd1, ob1 := f.obs.gated("first", hold)
	first := f.start("h1", []string{rules}, startArgs("first", cmd1, "--lock-timeout", "20s")...)
	eventually(t, 20*time.Second, "the first start to have read the store", func() bool { return exists(inside + ".reached") })

	cmd2, ob2 := f.obs.gated("second", hold)
	second := f.start("h2", nil, startArgs("second", cmd2, "--lock-timeout", "20s")...)
	ob2.waitStarted(t, 20*time.Second)

	letGo()
	// Refused, or (without the fence) running its command beside the
	// second's, which holds its slot until the test releases both.
	eventually(t, 20*time.Second, "the first start to be refused or to run its command", func() bool {
		select {
		case <-first.done:
			return true
		default:
			return ob1.hasStarted()
		}
	})
	release()
	r1 := first.wait(t, 20*time.Second)
	wantCode(t, second.wait(t, 20*time.Second), "the second start", 0)
	admitted := 1
	if r1.Code == 0 {
		admitted++
	}
	most, _ := f.obs.maxConcurrent()
	return admitted, most, r1
}

// fleetEarlierRelease: during a rollout a crew of the previous release may
// hold its admission mutex (a key on its lease under
// locks/dispatch-admission/, and its holder note). This crew commits
// nothing while it does (that crew would not see its writes); a start that
// keeps finding it there times out with 125, naming it; once it is gone,
// starts go through.
func fleetEarlierRelease(t *testing.T, c *etcdCluster) {
	f := newEtcdFleet(t, c)
	f.initMax(2)
	prefix := "/" + f.store[strings.LastIndex(f.store, "/")+1:]
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.endpoints(), ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := cli.Grant(ctx, 60)
	require.NoError(t, err)
	defer cli.Revoke(context.Background(), l.ID)
	since := time.Now().UTC().Truncate(time.Second)
	_, err = cli.Txn(ctx).Then(
		clientv3.OpPut(fmt.Sprintf("%s/locks/dispatch-admission/%x", prefix, int64(l.ID)), "", clientv3.WithLease(l.ID)),
		clientv3.OpPut(prefix+"/locks/dispatch-admission.holder",
			fmt.Sprintf(`{"host":"old-h","pid":4242,"since":%q}`, since.Format(time.RFC3339)), clientv3.WithLease(l.ID)),
	).Commit()
	require.NoError(t, err)

	r := f.run("h1", startArgs("t", []string{"true"}, "--lock-timeout", "1s")...)
	wantCode(t, r, "crew start while a crew of an earlier release holds its admission mutex", 125)
	assert.Contains(t, r.Stderr, "crew: t: timed out after 1s: admission on etcd store "+f.store+" was tried ")
	assert.Contains(t, r.Stderr, "times, and each time another crew changed the store first (the last: a crew of an earlier release "+
		"held the admission mutex under "+prefix+"/locks/dispatch-admission/ (this crew commits nothing while one does; upgrade every host), "+
		"by pid 4242 on host old-h since "+since.Format(time.RFC3339)+"); crew takes no admission lock on etcd: try again, or raise --lock-timeout")
	assert.Empty(t, f.status().Active, "nothing was written")

	_, err = cli.Revoke(ctx, l.ID) // the old crew leaves its critical section
	require.NoError(t, err)
	wantCode(t, f.run("h1", startArgs("t", []string{"true"}, "--lock-timeout", "5s")...), "crew start once it is gone", 0)
}
