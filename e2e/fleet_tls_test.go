//go:build etcd

package e2e

// crew on an etcd that speaks TLS only, asks for client certificates and
// has authentication on (issue 26): the CA, the client certificate and
// key, the user and the password, from flags, from crew's variables and
// from etcdctl's, the way etcdctl users set them; never a password on a
// command line (ps) or in a record.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
)

// tlsFiles are a test CA's certificate and the PEM files it signed.
type tlsFiles struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

// newTLSFiles makes a CA, a server certificate for 127.0.0.1 and a client
// certificate whose name is no etcd user (so only a password
// authenticates crew), in dir.
func newTLSFiles(t *testing.T, dir string) tlsFiles {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "crew test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	f := tlsFiles{ca: filepath.Join(dir, "ca.pem")}
	writePEM(t, f.ca, "CERTIFICATE", caDER)
	leaf := func(serial int64, name string, usage []x509.ExtKeyUsage, ips []net.IP) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage, IPAddresses: ips}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		kder, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		cert, keyPath := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, cert, "CERTIFICATE", der)
		writePEM(t, keyPath, "EC PRIVATE KEY", kder)
		return cert, keyPath
	}
	f.serverCert, f.serverKey = leaf(2, "etcd-server", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		[]net.IP{net.IPv4(127, 0, 0, 1)})
	f.clientCert, f.clientKey = leaf(3, "some-host", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil)
	return f
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
}

// startSecureEtcd serves one member over TLS only, with client
// certificates required, and authentication on: user crew (password
// password) may read and write under /PREFIX/, nothing else.
func startSecureEtcd(t *testing.T, f tlsFiles, prefix, password string) string {
	t.Helper()
	ports, err := freePorts(2)
	require.NoError(t, err)
	cfg := embed.NewConfig()
	cfg.Name = "secure"
	cfg.Dir = filepath.Join(t.TempDir(), "etcd")
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	cu := url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = "secure=" + pu.String()
	// Passwords are checked with bcrypt, in this race-instrumented test
	// process: at etcd's default cost a check can take seconds.
	cfg.BcryptCost = uint(bcrypt.MinCost)
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: f.serverCert, KeyFile: f.serverKey, TrustedCAFile: f.ca, ClientCertAuth: true}
	e, err := embed.StartEtcd(cfg)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("the TLS etcd is not ready")
	}

	tlsCfg, err := transport.TLSInfo{CertFile: f.clientCert, KeyFile: f.clientKey, TrustedCAFile: f.ca}.ClientConfig()
	require.NoError(t, err)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu.String()}, TLS: tlsCfg, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "root-password"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "crew-rw"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "crew-rw", "/"+prefix+"/", clientv3.GetPrefixRangeEnd("/"+prefix+"/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "crew", password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "crew", "crew-rw"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		require.NoError(t, step())
	}
	return cu.Host
}

// fleetTLSAndAuth: crew on a TLS-only etcd with authentication.
func fleetTLSAndAuth(t *testing.T) {
	dir := t.TempDir()
	files := newTLSFiles(t, dir)
	const password = "pw-Zq7-never-shown"
	const prefix = "crew-tls"
	ep := startSecureEtcd(t, files, prefix, password)
	f := newFleet(t, "etcd", "etcd://"+ep+"/"+prefix)
	pwFile := filepath.Join(dir, "password")
	require.NoError(t, os.WriteFile(pwFile, []byte(password+"\n"), 0o600))

	crewVars := []string{"CREW_ETCD_CACERT=" + files.ca, "CREW_ETCD_CERT=" + files.clientCert, "CREW_ETCD_KEY=" + files.clientKey,
		"CREW_ETCD_USER=crew", "CREW_ETCD_PASSWORD=" + password}
	ctlVars := []string{"ETCDCTL_CACERT=" + files.ca, "ETCDCTL_CERT=" + files.clientCert, "ETCDCTL_KEY=" + files.clientKey,
		"ETCDCTL_USER=crew:" + password}
	flags := []string{"--etcd-cacert", files.ca, "--etcd-cert", files.clientCert, "--etcd-key", files.clientKey,
		"--etcd-user", "crew", "--etcd-password-file", pwFile}
	runWith := func(env []string, args ...string) result {
		t.Helper()
		r, _, err := f.tryRunFor(60*time.Second, "h1", env, args...)
		require.NoError(t, err)
		return r
	}

	wantCode(t, runWith(crewVars, "init", "--max", "1"), "crew init with crew's variables", 0)

	// A run on crew's variables: neither its command line nor its lease
	// guard's shows the password, and its record does not hold it.
	gate, open := f.gate("tls")
	cmd, ob := f.obs.gated("tls", gate)
	p := f.start("h1", crewVars, startArgs("secure", cmd)...)
	ob.waitStarted(t, 30*time.Second)
	for _, pid := range []int{p.cmd.Process.Pid, mustPGID(t, ob.pid)} {
		line, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		require.NoError(t, err)
		assert.NotContains(t, string(line), password, "the password on a command line (pid %d)", pid)
	}
	open()
	wantCode(t, p.wait(t, 30*time.Second), "crew start with crew's variables", 0)

	// etcdctl's variables, USER:PASSWORD included; and the flags, with
	// the password in a file, for a detached run too.
	wantCode(t, runWith(ctlVars, startArgs("ctl", []string{"true"})...), "crew start with etcdctl's variables", 0)
	wantCode(t, runWith(nil, append(flags, startArgs("flags", []string{"true"})...)...), "crew start with the flags", 0)
	r := runWith(nil, append(flags, startArgs("detached", []string{"sh", "-c", "exit 3"}, "--detach")...)...)
	wantCode(t, r, "crew start --detach with the flags", 0)
	wantCode(t, runWith(ctlVars, "wait", strings.TrimSpace(r.Stdout)), "crew wait of the detached run", 3)

	for _, args := range [][]string{{"status", "--json"}, {"history", "--json"}} {
		r := runWith(crewVars, args...)
		wantCode(t, r, fmt.Sprintf("crew %v", args), 0)
		assert.Contains(t, r.Stdout, "secure")
		assert.NotContains(t, r.Stdout, password, "crew %v shows the password", args)
	}

	// What does not work, and says why.
	for _, tc := range []struct {
		what string
		env  []string
		args []string
		code int
		says string
	}{
		{"PasswordInAFlag", nil, append(flags[:6:6], "--etcd-user", "crew:"+password, "status"), 64,
			"--etcd-user takes a user name only: a password on the command line is shown to every user by ps"},
		{"WrongPassword", []string{"CREW_ETCD_CACERT=" + files.ca, "CREW_ETCD_CERT=" + files.clientCert, "CREW_ETCD_KEY=" + files.clientKey,
			"CREW_ETCD_USER=crew", "CREW_ETCD_PASSWORD=wrong"}, []string{"status"}, 125, "authentication failed"},
		{"NoTLS", nil, []string{"status"}, 125, "etcd store etcd://" + ep},
		{"NoCA", nil, []string{"--etcd-cacert", filepath.Join(dir, "missing.pem"), "status"}, 64, "read the CA bundle (--etcd-cacert)"},
		{"CertWithoutKey", nil, []string{"--etcd-cert", files.clientCert, "status"}, 64, "--etcd-cert and --etcd-key go together"},
		{"PasswordWithoutUser", []string{"CREW_ETCD_PASSWORD=" + password}, []string{"status"}, 64, "an etcd password is set but no user"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r, _, err := f.tryRunFor(60*time.Second, "h1", tc.env, tc.args...)
			require.NoError(t, err)
			wantCode(t, r, tc.what, tc.code)
			assert.Contains(t, r.Stderr, tc.says)
			assert.NotContains(t, r.Stderr, password, "an error shows the password")
		})
	}
}

// mustPGID is the process group of pid (the command's: led by its lease
// guard).
func mustPGID(t *testing.T, pid int) int {
	t.Helper()
	st, err := readStat(pid)
	require.NoError(t, err)
	return st.pgrp
}
