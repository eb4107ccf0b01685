//go:build etcd

package fleet

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// A key that crew writes on a lease, found on none (planted, or copied by
// etcdctl make-mirror, which drops leases), is foreign: crew skips it (it
// blocks no start), status reports it, and crew recover removes it.
func TestLeaselessKeysAreForeign(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, f *Fleet) string // returns the key
	}{
		{"AdmissionLockKey", func(t *testing.T, f *Fleet) string {
			return putLeaseless(t, f, f.k.admissionLock()+"/694d9a1b2c3d4e5f", "")
		}},
		{"QueueTicket", func(t *testing.T, f *Fleet) string {
			now := time.Now().UTC()
			tk := &record.Ticket{Version: record.TicketVersion, RunID: record.NewRunID(now), Task: "other",
				Command: []string{"true"}, Host: "h9", PID: 4711, CreatedAt: now}
			b, err := tk.Encode()
			require.NoError(t, err)
			return putLeaseless(t, f, f.k.ticket(tk.RunID), string(b))
		}},
		{"QueueJunk", func(t *testing.T, f *Fleet) string {
			return putLeaseless(t, f, f.k.queuePrefix()+"junk", "junk")
		}},
		{"OwnerKey", func(t *testing.T, f *Fleet) string {
			r := putActive(t, f, "other", record.Running)
			return putLeaseless(t, f, f.k.owner(r.RunID), "{}")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := open(t)
			d := over(f)
			_, err := d.Admin().Init(1, true, nil, 5*time.Second)
			require.NoError(t, err)
			key := tc.plant(t, f)

			snap, err := d.Status(vocab.StatusQuery{})
			require.NoError(t, err)
			assert.True(t, slices.ContainsFunc(snap.Problems, func(p vocab.Problem) bool {
				return p.Path == key && strings.Contains(p.Error, "on no lease") && !p.HoldsSlot
			}), "status reports %s: %+v", key, snap.Problems)
			assert.Zero(t, snap.SlotsInUse, "a foreign key holds no slot")

			req := startReq("a", "true")
			req.LockTimeout = 2 * time.Second
			_, err = d.Start(req)
			require.NoError(t, err, "a foreign key blocks no start")

			rep, err := d.Admin().Recover(dispatch.RecoverOptions{})
			require.NoError(t, err)
			got, err := f.cli.Get(context.Background(), key)
			require.NoError(t, err)
			assert.Empty(t, got.Kvs, "crew recover removed %s: %+v", key, rep.Items)
			snap, err = d.Status(vocab.StatusQuery{})
			require.NoError(t, err)
			assert.Empty(t, snap.Problems)
		})
	}
}

func putLeaseless(t *testing.T, f *Fleet, key, value string) string {
	t.Helper()
	_, err := f.cli.Put(context.Background(), key, value)
	require.NoError(t, err)
	return key
}
