package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEtcdCreds: a flag wins over crew's variable, which wins over
// etcdctl's; a password comes from a variable or a file, never a flag.
func TestEtcdCreds(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, tc := range []struct {
		what  string
		flags etcdFlags
		env   map[string]string
		want  etcdCreds
	}{
		{"etcdctl's variables", etcdFlags{}, map[string]string{"ETCDCTL_CACERT": "ca", "ETCDCTL_CERT": "c", "ETCDCTL_KEY": "k", "ETCDCTL_USER": "u:pw"},
			etcdCreds{CACert: "ca", Cert: "c", Key: "k", User: "u", Password: "pw"}},
		{"crew's over etcdctl's", etcdFlags{}, map[string]string{"ETCDCTL_CACERT": "ca", "CREW_ETCD_CACERT": "crew-ca",
			"ETCDCTL_USER": "u", "CREW_ETCD_USER": "crew", "ETCDCTL_PASSWORD": "ctl-pw", "CREW_ETCD_PASSWORD": "crew-pw"},
			etcdCreds{CACert: "crew-ca", User: "crew", Password: "crew-pw"}},
		{"flags over both", etcdFlags{cacert: "f-ca", user: "f-user", passwordFile: "pwfile"},
			map[string]string{"CREW_ETCD_CACERT": "crew-ca", "CREW_ETCD_USER": "crew:pw"},
			etcdCreds{CACert: "f-ca", User: "f-user", Password: "pw", PasswordFile: "pwfile"}},
		{"nothing", etcdFlags{}, nil, etcdCreds{}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			g := &globalOptions{getenv: env(tc.env), etcd: tc.flags}
			got, err := g.etcdCreds()
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	for _, tc := range []struct {
		what  string
		flags etcdFlags
		env   map[string]string
		says  string
	}{
		{"password in a flag", etcdFlags{user: "u:pw"}, nil, "--etcd-user takes a user name only"},
		{"password without user", etcdFlags{}, map[string]string{"ETCDCTL_PASSWORD": "pw"}, "an etcd password is set but no user"},
		{"password file without user", etcdFlags{passwordFile: "f"}, nil, "an etcd password is set but no user"},
		{"cert without key", etcdFlags{cert: "c"}, nil, "--etcd-cert and --etcd-key go together"},
		{"key without cert", etcdFlags{}, map[string]string{"ETCDCTL_KEY": "k"}, "--etcd-cert and --etcd-key go together"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			g := &globalOptions{getenv: env(tc.env), etcd: tc.flags}
			_, err := g.etcdCreds()
			var usage *usageError
			require.True(t, errors.As(err, &usage), "a usage error: %v", err)
			assert.Contains(t, err.Error(), tc.says)
			assert.NotContains(t, err.Error(), "pw")
		})
	}
}
