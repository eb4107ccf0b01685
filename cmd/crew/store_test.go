package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The store flags' errors, whether or not this crew has the etcd backend.
func TestStoreUsageErrors(t *testing.T) {
	for _, c := range []struct {
		name, stderr string
		env          map[string]string
		args         []string
	}{
		{name: "not etcd", args: []string{"--store", "http://127.0.0.1:1/x", "status"},
			stderr: `crew: store "http://127.0.0.1:1/x": crew knows etcd stores only (etcd://HOST:PORT[,HOST:PORT...]/PREFIX)`},
		{name: "root and store", args: []string{"--root", "/tmp/x", "--store", "etcd://127.0.0.1:1/x", "status"},
			stderr: "crew: --root and --store (or CREW_STORE) do not go together: a run lives in one store"},
		{name: "lease ttl locally", args: []string{"--root", "/nonexistent/x", "start", "--lease-ttl", "5s", "t", "--", "true"},
			stderr: "crew: --lease-ttl is for an etcd store (--store or CREW_STORE)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("CREW_STORE", "")
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			r := crew(t, c.args...)
			assert.Equal(t, exitUsage, r.code, r.stderr)
			assert.Contains(t, r.stderr, c.stderr)
		})
	}
}
