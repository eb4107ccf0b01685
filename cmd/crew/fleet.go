package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/recovery"
	"github.com/crew-dev/crew/internal/vocab"
)

// fleetStore is crew on a store shared by many hosts (etcd: internal/fleet).
// It is linked only into a crew built with -tags etcd (fleet_etcd.go), so
// the local default never pays the etcd client's start-up cost.
type fleetStore interface {
	Init(maxInProgress int, setMax bool, pools []vocab.PoolChange, changes ...vocab.ConfigChange) (*vocab.InitResult, error)
	Start(req vocab.StartRequest, leaseTTL time.Duration) (record.RunID, error)
	Status(taskFilter string) (*vocab.Snapshot, error)
	Recover(opts recovery.Options) (*recovery.Report, error)
	History(q vocab.HistoryQuery) (*vocab.History, error)
	Prune(opts recovery.PruneOptions) (*recovery.PruneReport, error)
	PruneConfigured(dryRun bool) (*recovery.PruneReport, error)
	// LogHere says whether a run's log is on this host (in the local
	// state root), and where it is if not.
	LogHere(id record.RunID) error
	runOps
	Close() error
}

// runOps are what crew stop, crew wait and crew status RUN-ID need of a
// store: *dispatch.Dispatcher has them for a state root, the etcd store
// for itself.
type runOps interface {
	Resolve(arg string) (record.RunID, error)
	TaskOf(id record.RunID) string
	Run(id record.RunID) (*vocab.RunView, error)
	StopWaiter(id record.RunID, sig syscall.Signal) (bool, error)
	Stop(id record.RunID, opts vocab.StopOptions) (*record.Run, error)
	WaitRun(ctx context.Context, id record.RunID) (*record.Run, error)
}

// runOps opens the store a run-level command works on; close it when done.
func (g *globalOptions) runOps() (runOps, func(), error) {
	fl, err := g.fleet()
	if err != nil {
		return nil, nil, err
	}
	if fl != nil {
		return fl, func() { fl.Close() }, nil
	}
	d, err := g.dispatcher()
	if err != nil {
		return nil, nil, err
	}
	return d, func() {}, nil
}

// openFleet connects to an etcd store; nil in a crew built without it.
// Its runs' logs are kept in logRoot, this host's local state root.
var openFleet func(url, host, logRoot string) (fleetStore, error)

// guardMain is the lease guard's main (crew __lease-guard), nil without etcd.
var guardMain func() int

// hiddenMains are crew's own helper processes, by their first argument:
// no command line of crew's, no cobra.
var hiddenMains = map[string]func(args []string) int{}

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

// fleet opens the shared store, or returns nil for the local state root.
func (g *globalOptions) fleet() (fleetStore, error) {
	url := g.storeURL()
	switch {
	case url == "":
		return nil, nil
	case g.root != "":
		return nil, &usageError{fmt.Errorf("--root and --store (or CREW_STORE) do not go together: a run lives in one store")}
	case !strings.HasPrefix(url, "etcd://"):
		return nil, &usageError{fmt.Errorf("store %q: crew knows etcd stores only (etcd://HOST:PORT[,HOST:PORT...]/PREFIX)", url)}
	case openFleet == nil:
		return nil, errors.New("this crew was built without the etcd backend; build the one that has it with `make build-etcd` " +
			"(go build -tags etcd ./cmd/crew), or unset --store/CREW_STORE to use the local state root")
	}
	logRoot, err := g.stateRoot()
	if err != nil {
		logRoot = "" // no local root to be found: runs keep no log
	}
	return openFleet(url, g.host(), logRoot)
}

// notOnFleet refuses a command or flag the etcd backend does not have yet.
func notOnFleet(what string) error {
	return &usageError{fmt.Errorf("%s is not available with an etcd store yet (on etcd: crew init --max/--pool/--retain/--retain-for/--log-max, "+
		"crew start (every flag), crew status [TASK|RUN-ID], crew stop, crew wait, crew logs, crew history, crew prune, crew recover); see README, \"Running across machines\"", what)}
}

// leaseTTL is crew start's --lease-ttl, else CREW_LEASE_TTL, else 10s.
func (o *startOptions) leaseTTLFor(cmd *cobra.Command) (time.Duration, error) {
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
