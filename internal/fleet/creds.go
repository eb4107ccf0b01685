//go:build etcd

package fleet

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// Credentials are how crew proves itself to etcd, as etcdctl's --cacert,
// --cert, --key and --user say it: TLS is on once any of the files is
// given; a user authenticates with a password. The password never goes
// into a record, an error or a command line (a detached supervisor is
// told the file it came from, or inherits the environment it came from).
type Credentials struct {
	// CACert verifies etcd's certificate (empty: the system's roots).
	CACert string
	// Cert and Key are the client certificate crew presents.
	Cert, Key string
	// User and Password authenticate crew as an etcd user.
	User, Password string
	// PasswordFile holds the password (its first line) if Password is
	// empty.
	PasswordFile string
}

// CredentialsError is credentials crew cannot use: a file that cannot be
// read or parsed, a password without a user.
type CredentialsError struct{ Err error }

func (e *CredentialsError) Error() string { return e.Err.Error() }
func (e *CredentialsError) Unwrap() error { return e.Err }

// tls reports whether the connection is TLS.
func (c Credentials) tls() bool { return c.CACert != "" || c.Cert != "" || c.Key != "" }

// load is the TLS configuration (nil: plain) and the password.
func (c Credentials) load(url string) (*tls.Config, string, error) {
	password, err := c.password()
	if err != nil {
		return nil, "", &CredentialsError{fmt.Errorf("etcd store %s: %w", url, err)}
	}
	if !c.tls() {
		return nil, password, nil
	}
	cfg, err := c.tlsConfig()
	if err != nil {
		return nil, "", &CredentialsError{fmt.Errorf("etcd store %s: %w", url, err)}
	}
	return cfg, password, nil
}

func (c Credentials) password() (string, error) {
	if c.Password != "" || c.PasswordFile == "" {
		return c.Password, nil
	}
	f, err := os.Open(c.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("read the etcd password: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() || strings.TrimRight(sc.Text(), "\r") == "" {
		return "", fmt.Errorf("read the etcd password: %s: its first line is empty", c.PasswordFile)
	}
	return strings.TrimRight(sc.Text(), "\r"), nil
}

func (c Credentials) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CACert != "" {
		pem, err := os.ReadFile(c.CACert)
		if err != nil {
			return nil, fmt.Errorf("read the CA bundle (--etcd-cacert): %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the CA bundle %s (--etcd-cacert) holds no PEM certificate", c.CACert)
		}
	}
	if c.Cert != "" || c.Key != "" {
		pair, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("load the client certificate %s and key %s (--etcd-cert, --etcd-key): %w", c.Cert, c.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// secure is endpoints reached over TLS.
func secure(endpoints []string) []string {
	out := make([]string, len(endpoints))
	for i, e := range endpoints {
		out[i] = "https://" + strings.TrimPrefix(e, "http://")
	}
	return out
}

// args are the flags that give a detached supervisor these credentials:
// file names and the user, never the password (it reads the file, or
// inherits the variable, the password came from).
func (c Credentials) args() []string {
	var out []string
	for _, f := range []struct{ flag, v string }{
		{"--etcd-cacert", c.CACert}, {"--etcd-cert", c.Cert}, {"--etcd-key", c.Key},
		{"--etcd-user", c.User}, {"--etcd-password-file", c.PasswordFile},
	} {
		if f.v != "" {
			out = append(out, f.flag, f.v)
		}
	}
	return out
}
