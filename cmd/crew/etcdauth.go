package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// etcdFlags are how crew proves itself to an etcd store, as etcdctl's
// --cacert, --cert, --key and --user are; each defaults to crew's own
// variable (CREW_ETCD_CACERT, ...), else etcdctl's (ETCDCTL_CACERT, ...),
// so that a shell set up for etcdctl works as it is. A password is never
// a flag: every user sees a command line in ps. It comes from
// CREW_ETCD_PASSWORD or ETCDCTL_PASSWORD (or the USER:PASSWORD form of
// CREW_ETCD_USER or ETCDCTL_USER, as etcdctl takes it), or from the file
// --etcd-password-file names.
type etcdFlags struct {
	cacert, cert, key, user, passwordFile string
}

// etcdFlagNames are the --etcd-* flags, which a crew without the etcd
// backend hides.
var etcdFlagNames = []string{"etcd-cacert", "etcd-cert", "etcd-key", "etcd-user", "etcd-password-file"}

func (e *etcdFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&e.cacert, "etcd-cacert", "", "etcd store: verify etcd's certificate with this CA bundle; TLS is on once this, --etcd-cert or --etcd-key is set (default $CREW_ETCD_CACERT, else $ETCDCTL_CACERT)")
	fs.StringVar(&e.cert, "etcd-cert", "", "etcd store: the client certificate crew presents (default $CREW_ETCD_CERT, else $ETCDCTL_CERT)")
	fs.StringVar(&e.key, "etcd-key", "", "etcd store: the client certificate's key (default $CREW_ETCD_KEY, else $ETCDCTL_KEY)")
	fs.StringVar(&e.user, "etcd-user", "", "etcd store: the etcd user crew authenticates as; its password from $CREW_ETCD_PASSWORD (else $ETCDCTL_PASSWORD) or --etcd-password-file, never a flag (default $CREW_ETCD_USER, else $ETCDCTL_USER)")
	fs.StringVar(&e.passwordFile, "etcd-password-file", "", "etcd store: a file whose first line is the etcd user's password (default $CREW_ETCD_PASSWORD_FILE)")
}

// etcdCreds are the credentials an etcd store is opened with.
type etcdCreds struct {
	CACert, Cert, Key string
	User, Password    string
	// PasswordFile is where Password came from, if a file: a detached
	// supervisor is told the file, never the password.
	PasswordFile string
}

// etcdCreds resolves the --etcd-* flags and their variables.
func (g *globalOptions) etcdCreds() (etcdCreds, error) {
	e := g.etcd
	pick := func(flag, crewVar, ctlVar string) string {
		if flag != "" {
			return flag
		}
		if v := g.getenv(crewVar); v != "" {
			return v
		}
		return g.getenv(ctlVar)
	}
	c := etcdCreds{
		CACert: pick(e.cacert, "CREW_ETCD_CACERT", "ETCDCTL_CACERT"),
		Cert:   pick(e.cert, "CREW_ETCD_CERT", "ETCDCTL_CERT"),
		Key:    pick(e.key, "CREW_ETCD_KEY", "ETCDCTL_KEY"),
		// CREW_ETCD_PASSWORD_FILE has no etcdctl counterpart.
		PasswordFile: pick(e.passwordFile, "CREW_ETCD_PASSWORD_FILE", ""),
	}
	if strings.Contains(e.user, ":") {
		return etcdCreds{}, &usageError{fmt.Errorf("--etcd-user takes a user name only: a password on the command line is shown " +
			"to every user by ps; give it in $CREW_ETCD_PASSWORD (or $ETCDCTL_PASSWORD) or --etcd-password-file")}
	}
	// USER:PASSWORD comes from a variable only; its password stands even
	// when --etcd-user names the user (a detached supervisor is given
	// the flag, and inherits the variable).
	envUser, envPassword, _ := strings.Cut(pick("", "CREW_ETCD_USER", "ETCDCTL_USER"), ":")
	if e.user != "" {
		c.User = e.user
	} else {
		c.User = envUser
	}
	c.Password = pick("", "CREW_ETCD_PASSWORD", "ETCDCTL_PASSWORD")
	if c.Password == "" {
		c.Password = envPassword
	}
	switch {
	case c.User == "" && (c.Password != "" || c.PasswordFile != ""):
		return etcdCreds{}, &usageError{fmt.Errorf("an etcd password is set but no user: give --etcd-user (or $CREW_ETCD_USER)")}
	case (c.Cert == "") != (c.Key == ""):
		return etcdCreds{}, &usageError{fmt.Errorf("--etcd-cert and --etcd-key go together: a client certificate needs its key")}
	}
	return c, nil
}
