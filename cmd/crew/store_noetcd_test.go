//go:build !etcd

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A crew built without the etcd backend says how to get one, and touches
// nothing.
func TestStoreNeedsTheEtcdBuild(t *testing.T) {
	t.Setenv("CREW_STORE", "etcd://127.0.0.1:1/x")
	r := crew(t, "start", "t", "--", "true")
	assert.Equal(t, exitCrewFailure, r.code)
	assert.Contains(t, r.stderr, "crew: this crew was built without the etcd backend; build the one that has it with `make build-etcd` (go build -tags etcd ./cmd/crew)")
}
