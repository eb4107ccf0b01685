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
	c := o.creds
	f, err := fleet.Open(url, fleet.Options{Host: o.host, LeaseTTL: o.leaseTTL, Logs: o.logs,
		Credentials: fleet.Credentials{CACert: c.CACert, Cert: c.Cert, Key: c.Key, User: c.User, Password: c.Password, PasswordFile: c.PasswordFile}})
	var bad *fleet.URLError
	var badCreds *fleet.CredentialsError
	if errors.As(err, &bad) || errors.As(err, &badCreds) {
		return nil, "", &usageError{err}
	}
	if err != nil {
		return nil, "", err
	}
	return f, f.Host(), nil
}
