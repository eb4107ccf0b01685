package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/runstore"
)

// Every command gets its store from open, once: the etcd store of --store
// (or CREW_STORE), else the state root of --root (or CREW_ROOT, or the
// default). What a store cannot do, it refuses itself; no command asks
// which store it has.

// openOptions are what a store is opened with.
type openOptions struct {
	// leaseTTL is an etcd store's lease TTL for the runs this process
	// starts (crew start --lease-ttl).
	leaseTTL time.Duration
}

// etcdOptions are what an etcd store is opened with.
type etcdOptions struct {
	host     string
	leaseTTL time.Duration
	creds    etcdCreds
	// logs is this host's state root, where the logs of the runs it
	// supervises are kept.
	logs *runstore.Store
}

// openEtcd connects to an etcd store; nil in a crew built without it
// (store_etcd.go), so that the local default never pays the etcd
// client's start-up cost.
var openEtcd func(url string, o etcdOptions) (st backend.Store, host string, err error)

// guardMain is the lease guard's main (crew __lease-guard), nil without etcd.
var guardMain func() int

const (
	guardArg        = "__lease-guard"
	defaultLeaseTTL = 10 * time.Second
	minLeaseTTL     = 2 * time.Second
)

// storeURL is --store, else CREW_STORE: empty for the local state root.
func (g *globalOptions) storeURL() string {
	if g.store != "" {
		return g.store
	}
	return g.getenv("CREW_STORE")
}

// host is CREW_HOST: the name this host goes by in records, if set.
func (g *globalOptions) host() string { return g.getenv("CREW_HOST") }

// open opens the store this command works on; close it when done.
func (g *globalOptions) open(o openOptions) (*dispatch.Dispatcher, error) {
	url := g.storeURL()
	if url == "" {
		return g.openRoot()
	}
	switch {
	case g.root != "":
		return nil, &usageError{fmt.Errorf("--root and --store (or CREW_STORE) do not go together: a run lives in one store")}
	case !strings.HasPrefix(url, "etcd://"):
		return nil, &usageError{fmt.Errorf("store %q: crew knows etcd stores only (etcd://HOST:PORT[,HOST:PORT...]/PREFIX)", url)}
	case openEtcd == nil:
		return nil, errors.New("this crew was built without the etcd backend; build the one that has it with `make build-etcd` " +
			"(go build -tags etcd ./cmd/crew), or unset --store/CREW_STORE to use the local state root")
	}
	creds, err := g.etcdCreds()
	if err != nil {
		return nil, err
	}
	eo := etcdOptions{host: g.host(), leaseTTL: o.leaseTTL, creds: creds}
	if root, err := g.stateRoot(); err == nil {
		eo.logs = runstore.New(root)
	}
	st, host, err := openEtcd(url, eo)
	if err != nil {
		return nil, err
	}
	return dispatch.Over(st, eo.logs, host), nil
}

// openRoot opens the state root: --root, else CREW_ROOT, else
// ${XDG_STATE_HOME:-$HOME/.local/state}/crew.
func (g *globalOptions) openRoot() (*dispatch.Dispatcher, error) {
	root, err := g.stateRoot()
	if err != nil {
		return nil, err
	}
	d := dispatch.New(root)
	if h := g.host(); h != "" {
		d.Host = h
	}
	return d, nil
}

// leaseTTLFor is crew start's --lease-ttl, else CREW_LEASE_TTL, else 10s;
// on a state root, where a slot cannot run out, the flag is refused.
func (o *startOptions) leaseTTLFor(cmd *cobra.Command) (time.Duration, error) {
	if o.storeURL() == "" {
		if cmd.Flags().Changed("lease-ttl") {
			return 0, &usageError{fmt.Errorf("--lease-ttl is for an etcd store (--store or CREW_STORE); a local run's slot is held by a lock that dies with its processes")}
		}
		return 0, nil
	}
	ttl := o.leaseTTL
	if !cmd.Flags().Changed("lease-ttl") {
		ttl = defaultLeaseTTL
		if v := o.getenv("CREW_LEASE_TTL"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return 0, &usageError{fmt.Errorf("CREW_LEASE_TTL=%q is not a duration (such as 10s)", v)}
			}
			ttl = d
		}
	}
	if ttl < minLeaseTTL {
		return 0, &usageError{fmt.Errorf("the lease TTL must be at least %s, not %s", minLeaseTTL, ttl)}
	}
	return ttl, nil
}
