//go:build etcd

// Package fleet is crew on etcd: the same admission, records and recovery
// as on one machine's state root, shared by every host that points at the
// same etcd cluster and key prefix. It is built only with the etcd tag, so
// the local default never links the etcd client (gRPC and protobuf cost a
// process start about 5 ms of package init).
//
// The mapping (shared/DESIGN.md's mechanisms, on etcd's own primitives):
//
//   - admission lock: none; admission is optimistic (fence.go). A start
//     reads the store in one snapshot at revision R, decides, and commits
//     its reservation (or ticket, or config) in one transaction only if no
//     run, ticket or config was written since R; otherwise it reads and
//     decides again. A crew of an earlier release, which takes a mutex
//     under PREFIX/locks/dispatch-admission/, holds every commit off while
//     it is inside.
//   - persist before release: the reservation is that one transaction, its
//     owner key on the start's lease (a start that lost its lease writes
//     nothing); etcd commits it to a quorum's WAL before answering.
//   - owner lock: PREFIX/owners/RUN, attached to the supervisor's lease; the
//     slot count is derived from the active records whose owner key exists.
//   - queue tickets: PREFIX/queue/RUN, attached to the waiter's lease, in
//     creation-revision order; wake-ups by Watch.
//
// A slot must not outlive its lease: package leaseguard, the leader of the
// command's process group, kills the group before the lease can have
// expired by the host's monotonic clock (see lease.go).
package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

// Scheme is the URL scheme of an etcd store.
const Scheme = "etcd://"

// Location is a parsed etcd store URL: etcd://HOST:PORT[,HOST:PORT...]/PREFIX.
type Location struct {
	URL       string
	Endpoints []string
	// Prefix is the key prefix, "/" + PREFIX without a trailing slash.
	Prefix string
}

// URLError is a store URL crew cannot use.
type URLError struct{ Err error }

func (e *URLError) Error() string { return e.Err.Error() }
func (e *URLError) Unwrap() error { return e.Err }

// ParseURL parses an etcd store URL.
func ParseURL(u string) (Location, error) {
	loc, err := parseURL(u)
	if err != nil {
		return Location{}, &URLError{err}
	}
	return loc, nil
}

func parseURL(u string) (Location, error) {
	rest, ok := strings.CutPrefix(u, Scheme)
	if !ok {
		return Location{}, fmt.Errorf("store %q: not an etcd store URL (etcd://HOST:PORT[,HOST:PORT...]/PREFIX)", u)
	}
	// A ?query or #fragment would otherwise end up in the key prefix,
	// unseen: a host with "?x" would share no slots with one without.
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		return Location{}, fmt.Errorf("store %q: a store URL takes no ?query or #fragment (%q): "+
			"write etcd://HOST:PORT[,HOST:PORT...]/PREFIX", u, rest[i:])
	}
	hosts, prefix, _ := strings.Cut(rest, "/")
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		return Location{}, fmt.Errorf("store %q: give a key prefix after the endpoints, such as etcd://127.0.0.1:2379/team-a: "+
			"every host that shares slots uses the same prefix", u)
	}
	for _, seg := range strings.Split(prefix, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return Location{}, fmt.Errorf("store %q: the prefix %q has an empty, . or .. segment", u, prefix)
		}
	}
	loc := Location{URL: u, Prefix: "/" + prefix}
	for _, h := range strings.Split(hosts, ",") {
		if err := checkEndpoint(h); err != nil {
			return Location{}, fmt.Errorf("store %q: endpoint %q %w", u, h, err)
		}
		loc.Endpoints = append(loc.Endpoints, "http://"+h)
	}
	return loc, nil
}

// checkEndpoint refuses an endpoint the etcd client would only fail to
// dial, request after request, until crew blamed the cluster.
func checkEndpoint(h string) error {
	host, port, err := net.SplitHostPort(h)
	if err != nil || host == "" || port == "" {
		return errors.New("is not HOST:PORT")
	}
	if strings.Contains(host, "@") {
		return errors.New("carries credentials: a store URL is shown by crew status and handed to every command; " +
			"give the user with --etcd-user and the password in $CREW_ETCD_PASSWORD or --etcd-password-file")
	}
	if strings.ContainsAny(host, "/\\ \t") || strings.ContainsFunc(host, unicode.IsControl) {
		return fmt.Errorf("is not HOST:PORT: %q is not a host name or address", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '+' {
		return fmt.Errorf("is not HOST:PORT: the port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// keys is the layout under the prefix. Task names are never part of a
// key: run ids are.
type keys struct{ p string }

func (k keys) config() string                { return k.p + "/config" }
func (k keys) admissionLock() string         { return k.p + "/locks/dispatch-admission" }
func (k keys) admissionHolder() string       { return k.p + "/locks/dispatch-admission.holder" }
func (k keys) activePrefix() string          { return k.p + "/runs/active/" }
func (k keys) active(id record.RunID) string { return k.activePrefix() + string(id) }
func (k keys) donePrefix() string            { return k.p + "/runs/done/" }
func (k keys) done(id record.RunID) string   { return k.donePrefix() + string(id) }
func (k keys) ownerPrefix() string           { return k.p + "/owners/" }
func (k keys) owner(id record.RunID) string  { return k.ownerPrefix() + string(id) }
func (k keys) queuePrefix() string           { return k.p + "/queue/" }
func (k keys) ticket(id record.RunID) string { return k.queuePrefix() + string(id) }
func (k keys) finishedPrefix() string        { return k.p + "/finished/" }

// finished is run r's key in the index of finished runs: its finish time
// first, so that the keys sort in finish order.
func (k keys) finished(r *record.Run) string {
	return k.finishedPrefix() + r.FinishedAt.UTC().Format("20060102T150405.000000000Z") + "/" + string(r.RunID)
}
func (k keys) stopPrefix() string          { return k.p + "/stops/" }
func (k keys) stop(id record.RunID) string { return k.stopPrefix() + string(id) }
func (k keys) quarantinePrefix() string    { return k.p + "/quarantine/" }

// Fleet is one crew process's connection to an etcd store: a store of
// package backend, whose orchestration (package dispatch, supervise) is
// the same as on a state root's.
type Fleet struct {
	Loc Location
	cli *clientv3.Client
	k   keys
	// host names this host in records (CREW_HOST, else the hostname).
	host string
	// now is the wall clock of records; deadlines use the monotonic clock.
	now func() time.Time
	// logs is this host's local state root, where the logs of the runs
	// this host runs are kept.
	logs *runstore.Store
	// ttl is the lease TTL of the runs this process starts.
	ttl time.Duration
	// opTimeout bounds each request to etcd: a cluster without quorum
	// answers nothing, and crew must say so rather than hang.
	opTimeout time.Duration
	// creds are what a detached supervisor is told to connect with.
	creds Credentials
	// conflicts counts the section writes that found the store changed
	// since their read (fence.go), for the tests of the optimistic
	// admission.
	conflicts atomic.Int64
	// revoking are the revocations of finished runs' leases still under
	// way (run.Finish): Close waits for them.
	revoking sync.WaitGroup
}

// Options configure a connection.
type Options struct {
	// Host names this host in records; empty: the hostname.
	Host string
	// LeaseTTL is how long a run's slot outlives a supervisor that stopped
	// renewing its lease (DefaultLeaseTTL if zero).
	LeaseTTL time.Duration
	// Logs is this host's local state root, which keeps the logs of the
	// runs this host runs.
	Logs *runstore.Store
	// Now is the clock of records (time.Now if nil).
	Now func() time.Time
	// Credentials are how crew proves itself to etcd.
	Credentials Credentials
}

// DefaultOpTimeout bounds one request to etcd.
const DefaultOpTimeout = 5 * time.Second

// Open connects to the store at url. Connecting is lazy; the first
// request says whether etcd answers.
func Open(url string, o Options) (*Fleet, error) {
	loc, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	tlsCfg, password, err := o.Credentials.load(url)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		loc.Endpoints = secure(loc.Endpoints)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   loc.Endpoints,
		TLS:         tlsCfg,
		Username:    o.Credentials.User,
		Password:    password,
		DialTimeout: DefaultOpTimeout,
		// Notice a member that stopped answering (crashed, partitioned)
		// within seconds, so that requests move to another member.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		// The client's own log would write JSON to crew's stderr; crew
		// reports what fails itself.
		Logger: zap.NewNop(),
		// Keep the connection to a member that lost its peers from
		// serving reads: every read here is linearizable anyway.
		RejectOldCluster: false,
	})
	if err != nil {
		what := "connect"
		if o.Credentials.User != "" {
			what = "connect and authenticate as " + o.Credentials.User // etcd's client does both at once
		}
		f := &Fleet{Loc: loc, opTimeout: DefaultOpTimeout}
		return nil, f.wrap(what, err)
	}
	f := &Fleet{Loc: loc, cli: cli, k: keys{loc.Prefix}, host: o.Host, now: o.Now, logs: o.Logs, creds: o.Credentials,
		ttl: cmp.Or(o.LeaseTTL, DefaultLeaseTTL), opTimeout: DefaultOpTimeout}
	if f.host == "" {
		f.host, _ = os.Hostname()
	}
	f.host = cmp.Or(f.host, "unknown-host")
	if f.now == nil {
		f.now = time.Now
	}
	return f, nil
}

// Close disconnects, once the leases of the runs this process finished
// are revoked.
func (f *Fleet) Close() error {
	f.revoking.Wait()
	return f.cli.Close()
}

// Host is the name this host goes by in records.
func (f *Fleet) Host() string { return f.host }

// ctx is a context for one request.
func (f *Fleet) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), f.opTimeout)
}

// ctxBy is a context for one request that ends by deadline too (if it is
// not zero): a limit the user gave (--lock-timeout) is honoured, not
// rounded up to a whole request's timeout.
func (f *Fleet) ctxBy(deadline time.Time) (context.Context, context.CancelFunc) {
	end := time.Now().Add(f.opTimeout)
	if !deadline.IsZero() && deadline.Before(end) {
		end = deadline
	}
	return context.WithDeadline(context.Background(), end)
}

// UnavailableError is etcd not answering: no member reachable, or no
// quorum. Nothing was changed by the request that met it.
type UnavailableError struct {
	URL  string
	What string
	Err  error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("etcd store %s: %s: %v (is the cluster up, and does a majority of its members answer?)", e.URL, e.What, e.Err)
}
func (e *UnavailableError) Unwrap() error { return e.Err }

// wrap names the store and the step in an etcd error.
func (f *Fleet) wrap(what string, err error) error { return f.wrapWithin(what, err, f.opTimeout) }

// wrapWithin is wrap for a step that had limit to be answered in.
func (f *Fleet) wrapWithin(what string, err error, limit time.Duration) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		return &UnavailableError{URL: f.Loc.URL, What: what, Err: fmt.Errorf("no answer within %s", limit.Round(10*time.Millisecond))}
	}
	if unavailable(err) {
		return &UnavailableError{URL: f.Loc.URL, What: what, Err: err}
	}
	return fmt.Errorf("etcd store %s: %s: %w", f.Loc.URL, what, err)
}

// unavailable reports whether err says etcd could not serve the request
// now (a member going away, a leader change, no quorum) rather than that
// the request was wrong: such a request may be tried again.
func unavailable(err error) bool {
	switch rpctypes.Error(err) {
	case rpctypes.ErrTimeout, rpctypes.ErrNoLeader, rpctypes.ErrTimeoutDueToLeaderFail,
		rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrLeaderChanged, rpctypes.ErrStopped,
		rpctypes.ErrNotCapable, rpctypes.ErrTooManyRequests, rpctypes.ErrUnhealthy:
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	case codes.Unknown:
		// A member shutting down answers with its raft node's error.
		m := status.Convert(err).Message()
		return strings.Contains(m, "raft: stopped") || strings.Contains(m, "server stopped")
	}
	return false
}
