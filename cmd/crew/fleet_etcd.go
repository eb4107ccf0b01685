//go:build etcd

package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/fleet"
	"github.com/crew-dev/crew/internal/leaseguard"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

func init() {
	openFleet = func(url, host, logRoot string) (fleetStore, error) { return openEtcd(url, host, logRoot) }
	guardMain = leaseguard.Main
	hiddenMains[fleet.SuperviseArg] = superviseDetached
}

func openEtcd(url, host, logRoot string) (*fleet.Fleet, error) {
	f, err := fleet.Open(url, host)
	var bad *fleet.URLError
	if errors.As(err, &bad) {
		return nil, &usageError{err}
	}
	if err != nil {
		return nil, err
	}
	if logRoot != "" {
		f.Logs = runstore.New(logRoot)
	}
	return f, nil
}

// superviseDetached is a detached run's supervisor on an etcd store:
// crew __fleet-supervise RUN-ID LEASE-ID REVISION GRACE, with the store in
// CREW_STORE and the handover pipe as fd 3 (crew start --detach).
func superviseDetached(args []string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "crew: %v\n", err)
		return exitCodeFor(err)
	}
	if len(args) != 4 {
		return fail(&usageError{fmt.Errorf("%s wants RUN-ID LEASE-ID REVISION GRACE", fleet.SuperviseArg)})
	}
	id, err := record.ParseRunID(args[0])
	if err != nil {
		return fail(&usageError{err})
	}
	rev, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil {
		return fail(&usageError{err})
	}
	grace, err := time.ParseDuration(args[3])
	if err != nil {
		return fail(&usageError{err})
	}
	// The handover pipe came through exec, so it is not close-on-exec:
	// the guard and the command must not inherit it.
	syscall.CloseOnExec(3)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	surviveBrokenPipes()
	g := &globalOptions{getenv: os.Getenv}
	logRoot, _ := g.stateRoot()
	f, err := openEtcd(g.storeURL(), g.host(), logRoot)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	if err := f.SuperviseDetached(id, args[1], rev, grace, os.NewFile(3, "handover"), sigs); err != nil {
		return exitCodeFor(err)
	}
	return exitOK
}
