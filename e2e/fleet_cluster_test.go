//go:build etcd

package e2e

// A real etcd cluster of three members, embedded in the test process:
// loopback only, random free ports, data under a temporary directory, no
// logging, short heartbeat and election timeouts so that a leader change
// takes well under a second. Members can be stopped and started again
// (same data directory, same ports) to test what crew does when etcd
// loses its leader or its quorum.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc/grpclog"
)

type etcdMember struct {
	name       string
	dir        string
	clientPort int
	peerPort   int
	etcd       *embed.Etcd     // nil while stopped
	stopping   <-chan struct{} // closed once the last stop is complete
}

type etcdCluster struct {
	mu      sync.Mutex
	dir     string
	token   string
	members []*etcdMember
	// tickMs and electionMs are the members' heartbeat interval and
	// election timeout.
	tickMs, electionMs uint
}

var quietGRPC sync.Once

// freePorts returns n distinct loopback ports that were free a moment ago
// (held open together, so no two are the same).
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startCluster starts an n-member cluster and waits until it has a leader
// and every member serves.
func startCluster(n int) (*etcdCluster, error) { return startClusterTimed(n, 50, 500) }

// startStockCluster is startCluster with etcd's own heartbeat interval and
// election timeout (100 ms, 1 s): a leader change takes as long as on a
// cluster nobody tuned.
func startStockCluster(n int) (*etcdCluster, error) { return startClusterTimed(n, 100, 1000) }

func startClusterTimed(n int, tickMs, electionMs uint) (*etcdCluster, error) {
	quietGRPC.Do(func() {
		// etcd's client and server speak gRPC; its logger would otherwise
		// print every refused connection of a stopped member.
		grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
	})
	dir, err := os.MkdirTemp("", "crew-e2e-etcd-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &etcdCluster{dir: dir, token: filepath.Base(dir), tickMs: tickMs, electionMs: electionMs}
	for i := range n {
		c.members = append(c.members, &etcdMember{
			name:       fmt.Sprintf("m%d", i),
			dir:        filepath.Join(dir, fmt.Sprintf("m%d", i)),
			clientPort: ports[2*i],
			peerPort:   ports[2*i+1],
		})
	}
	// Every member must be started before any can be ready: the first
	// needs a quorum to publish itself.
	for i := range c.members {
		if err := c.launch(i); err != nil {
			c.close()
			return nil, err
		}
	}
	for i := range c.members {
		if err := c.ready(i, 30*time.Second); err != nil {
			c.close()
			return nil, err
		}
	}
	if _, err := c.waitLeader(10 * time.Second); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *etcdCluster) config(m *etcdMember) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	cfg.TickMs = c.tickMs
	cfg.ElectionMs = c.electionMs
	// No power is lost in a test: the data survives a member's restart
	// in the page cache, and fsync would only slow a small disk down.
	cfg.UnsafeNoFsync = true
	// etcd's own limits as a stock server has them (--max-txn-ops,
	// --max-request-bytes): crew must work within them.
	cfg.MaxTxnOps, cfg.MaxRequestBytes = 128, 1536*1024
	cfg.InitialClusterToken = c.token
	cfg.ClusterState = embed.ClusterStateFlagNew
	cu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", m.clientPort)}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", m.peerPort)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	var initial []string
	for _, o := range c.members {
		initial = append(initial, fmt.Sprintf("%s=http://127.0.0.1:%d", o.name, o.peerPort))
	}
	cfg.InitialCluster = strings.Join(initial, ",")
	return cfg
}

func (c *etcdCluster) launch(i int) error {
	c.mu.Lock()
	stopping := c.members[i].stopping
	c.mu.Unlock()
	if stopping != nil {
		<-stopping
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	if m.etcd != nil {
		return fmt.Errorf("etcd member %s already runs", m.name)
	}
	var err error
	// A port just closed can still be bound by a listener being shut
	// down: try a few times.
	for attempt := 0; attempt < 20; attempt++ {
		var e *embed.Etcd
		if e, err = embed.StartEtcd(c.config(m)); err == nil {
			m.etcd = e
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("start etcd member %s: %w", m.name, err)
}

func (c *etcdCluster) ready(i int, timeout time.Duration) error {
	c.mu.Lock()
	e := c.members[i].etcd
	c.mu.Unlock()
	if e == nil {
		return fmt.Errorf("etcd member %d is stopped", i)
	}
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd member %d: %v", i, err)
	case <-time.After(timeout):
		return fmt.Errorf("etcd member %d not ready after %s", i, timeout)
	}
}

// endpoint is member i's client address, HOST:PORT.
func (c *etcdCluster) endpoint(i int) string {
	return fmt.Sprintf("127.0.0.1:%d", c.members[i].clientPort)
}

// endpoints are every member's client addresses, comma-separated, as a
// store URL takes them.
func (c *etcdCluster) endpoints() string {
	var eps []string
	for i := range c.members {
		eps = append(eps, c.endpoint(i))
	}
	return strings.Join(eps, ",")
}

// storeURL is the crew store for prefix on every member.
func (c *etcdCluster) storeURL(prefix string) string {
	return "etcd://" + c.endpoints() + "/" + prefix
}

// leader is the index of the member that is leader now, as that member
// itself sees it; -1 if none is.
func (c *etcdCluster) leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.etcd == nil {
			continue
		}
		s := m.etcd.Server
		if uint64(s.Leader()) != 0 && s.Leader() == s.MemberID() {
			return i
		}
	}
	return -1
}

// waitLeader waits until the running members agree on a leader.
func (c *etcdCluster) waitLeader(timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		if l := c.leader(); l >= 0 && c.agreed(l) {
			return l, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("etcd cluster has no leader after %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *etcdCluster) agreed(l int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := c.members[l].etcd.Server.MemberID()
	for _, m := range c.members {
		if m.etcd != nil && m.etcd.Server.Leader() != want {
			return false
		}
	}
	return true
}

// stop stops member i. hard skips the leadership transfer a graceful
// stop does, as a crash would.
func (c *etcdCluster) stop(i int, hard bool) { <-c.stopAsync(i, hard) }

// stopAsync takes member i out of the cluster's view at once and stops it
// in the background; the channel closes once it has stopped. A member's
// client connections can linger for seconds after a hard stop, answering
// nothing, until its gRPC servers give up waiting for their streams.
func (c *etcdCluster) stopAsync(i int, hard bool) <-chan struct{} {
	c.mu.Lock()
	m := c.members[i]
	e := m.etcd
	m.etcd = nil
	done := make(chan struct{})
	defer c.mu.Unlock()
	if e == nil {
		if m.stopping != nil {
			return m.stopping
		}
		close(done)
		return done
	}
	m.stopping = done
	go func() {
		defer close(done)
		if hard {
			e.Server.HardStop()
		}
		e.Close()
	}()
	return done
}

// restart starts a stopped member i again, on its data and ports, and
// waits until it serves.
func (c *etcdCluster) restart(i int) error {
	if err := c.launch(i); err != nil {
		return err
	}
	return c.ready(i, 30*time.Second)
}

// running reports which members run.
func (c *etcdCluster) running() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []bool
	for _, m := range c.members {
		out = append(out, m.etcd != nil)
	}
	return out
}

// heal starts every stopped member again and waits for a leader; tests
// that stop members defer it, so later tests find the whole cluster.
func (c *etcdCluster) heal(t testing.TB) {
	t.Helper()
	var errs []error
	for i, up := range c.running() {
		if !up {
			errs = append(errs, c.launch(i))
		}
	}
	for i, up := range c.running() {
		if up {
			errs = append(errs, c.ready(i, 30*time.Second))
		}
	}
	_, err := c.waitLeader(15 * time.Second)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("heal the etcd cluster: %v", err)
	}
}

func (c *etcdCluster) close() {
	for i := range c.members {
		c.stop(i, false)
	}
	os.RemoveAll(c.dir)
}
