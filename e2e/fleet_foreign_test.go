//go:build etcd

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// put writes key=value on no lease, as an operator with etcdctl (or
// etcdctl make-mirror, which drops leases) would.
func (c *etcdCluster) put(t *testing.T, key, value string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.endpoints(), ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = cli.Put(ctx, key, value)
	require.NoError(t, err)
}

// fleetForeignKeys: keys crew did not write as it writes them (issue 26)
// block nothing and remove nothing they should not. A key on no lease
// under the admission lock no longer blocks every start, status shows it,
// crew recover removes it; junk under finished/ is never counted by crew
// prune --keep.
func fleetForeignKeys(t *testing.T, c *etcdCluster) {
	f := newEtcdFleet(t, c)
	f.initMax(1)
	prefix := "/" + f.store[strings.LastIndex(f.store, "/")+1:]
	lockKey := prefix + "/locks/dispatch-admission/694d9a1b2c3d4e5f"
	c.put(t, lockKey, "")
	c.put(t, prefix+"/finished/zzz", `{"task":"t","state":"succeeded"}`)
	c.put(t, prefix+"/finished/29991231T000000.000000000Z/r-29991231T000000.000000000Z-0123456789abcdef",
		`{"task":"t","state":"succeeded","exitCode":0}`)

	for range 3 {
		r := f.run("h1", startArgs("t", []string{"true"}, "--lock-timeout", "3s")...)
		wantCode(t, r, "crew start beside a foreign key under the admission lock", 0)
	}
	r := f.run("", "status")
	wantCode(t, r, "crew status", 0)
	assert.Contains(t, r.Stdout, lockKey+": a key on no lease", "status shows the foreign key")

	r = f.run("h2", "prune", "--keep", "2")
	wantCode(t, r, "crew prune --keep 2", 0)
	assert.Contains(t, r.Stdout, "removed 1 finished run(s)", "junk is not counted: %s", r.Stdout)
	var h struct {
		Runs []fleetRun `json:"runs"`
	}
	r = f.run("", "history", "--json")
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &h), r.Stdout)
	assert.Len(t, h.Runs, 2, "the two newest runs are kept")

	rep := f.recover("h3")
	var cleaned bool
	for _, it := range rep.Items {
		cleaned = cleaned || (it.Path == lockKey && it.Outcome == "cleaned")
	}
	assert.True(t, cleaned, "crew recover removes the foreign key: %+v", rep.Items)
	r = f.run("", "status")
	assert.NotContains(t, r.Stdout, lockKey)
}
