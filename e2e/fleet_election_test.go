//go:build etcd

package e2e

// What a lease's TTL means on a cluster nobody tuned (issue 26): a leader
// election must not stop the commands that run. Commands run on three
// hosts through proxies, one per member; the leader crashes (its proxy
// drops every connection, the member stops without handing leadership
// over), and the commands must live on for a whole TTL after the new
// leader is elected: by then, a supervisor that could not renew its lease
// through the election would have stopped its command.
//
// CREW_ELECTION_SWEEP=1 runs the same at TTLs of 2, 3, 5 and 10 s and logs
// what became of each run instead of requiring it to survive: the figures
// behind the default, in README's "Operating it".

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fleetLeaseAcrossElection(t *testing.T) {
	c, err := startStockCluster(3)
	require.NoError(t, err)
	t.Cleanup(c.close)
	if os.Getenv("CREW_ELECTION_SWEEP") == "" {
		leaseAcrossElection(t, c, 0, true)
		return
	}
	for _, ttl := range []time.Duration{2 * time.Second, 3 * time.Second, 5 * time.Second, 10 * time.Second} {
		t.Run(ttl.String(), func(t *testing.T) { leaseAcrossElection(t, c, ttl, false) })
	}
}

// leaseAcrossElection crashes c's leader while three commands run with
// --lease-ttl ttl (0: the default) and requires them to finish, if must.
func leaseAcrossElection(t *testing.T, c *etcdCluster, ttl time.Duration, must bool) {
	f := newEtcdFleet(t, c)
	defer c.heal(t)
	var proxies []*tcpProxy
	var eps []string
	for i := range c.members {
		proxies = append(proxies, startProxy(t, c.endpoint(i)))
		eps = append(eps, proxies[i].addr())
	}
	f.store = "etcd://" + strings.Join(eps, ",") + f.store[strings.LastIndex(f.store, "/"):]
	f.initMax(len(fleetHosts))
	var flags []string
	if ttl > 0 {
		flags = []string{"--lease-ttl", ttl.String()}
	}
	gate, open := f.gate("election")
	var starts []*proc
	var obs []*obsRun
	for i, h := range fleetHosts {
		cmd, ob := f.obs.gated(fmt.Sprintf("e%d", i), gate)
		starts = append(starts, f.start(h, nil, startArgs(fmt.Sprintf("election%d", i), cmd, flags...)...))
		obs = append(obs, ob)
	}
	for _, ob := range obs {
		ob.waitStarted(t, 20*time.Second)
	}
	// Launched and recorded running: what is under test is the lease of a
	// running command, not a launch's writes.
	eventually(t, 20*time.Second, "every run to be recorded running", func() bool {
		running := 0
		for _, r := range f.status().Active {
			if r.State == "running" {
				running++
			}
		}
		return running == len(starts)
	})

	leader := c.leader()
	require.GreaterOrEqual(t, leader, 0)
	stopAt := time.Now()
	proxies[leader].down()
	stopped := c.stopAsync(leader, true)
	newLeader, err := c.waitLeader(20 * time.Second)
	require.NoError(t, err)
	electedAt := time.Now()
	<-stopped
	// The span under test: a whole TTL (the default's, 10 s, if none was
	// given) after the election, every command still runs, or its run
	// was stopped for its lease.
	span := ttl
	if span == 0 {
		span = 10 * time.Second
	}
	held := time.NewTimer(time.Until(electedAt.Add(span)))
	<-held.C
	open()

	var lost []string
	for i, p := range starts {
		r := p.wait(t, 30*time.Second)
		if r.Code != 0 {
			lost = append(lost, fmt.Sprintf("%s: exit %d: %s", fleetHosts[i], r.Code, shortErr(r)))
		}
	}
	t.Logf("TTL %s: leader m%d crashed, m%d led %s later; %d of %d runs stopped: %v", cmpTTL(ttl), leader, newLeader,
		electedAt.Sub(stopAt).Round(time.Millisecond), len(lost), len(starts), lost)
	proxies[leader].heal()
	if must {
		assert.Empty(t, lost, "a leader election stopped runs at the default lease TTL")
	}
}

func cmpTTL(ttl time.Duration) string {
	if ttl == 0 {
		return "default"
	}
	return ttl.String()
}
