//go:build etcd

package main

import (
	"errors"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/fleet"
	"github.com/crew-dev/crew/internal/leaseguard"
)

func init() {
	openEtcd = openFleet
	guardMain = leaseguard.Main
}

// openFleet connects to the etcd store at url.
func openFleet(url string, o etcdOptions) (backend.Store, string, error) {
	f, err := fleet.Open(url, fleet.Options{Host: o.host, LeaseTTL: o.leaseTTL, Logs: o.logs})
	var bad *fleet.URLError
	if errors.As(err, &bad) {
		return nil, "", &usageError{err}
	}
	if err != nil {
		return nil, "", err
	}
	return f, f.Host(), nil
}
