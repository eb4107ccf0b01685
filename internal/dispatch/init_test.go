package dispatch_test

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

func TestInitWritesAndKeepsTheCap(t *testing.T) {
	d := newDispatcher(t)

	// First run without --max: the default cap, written.
	res, err := d.Admin().Init(99, false, nil, time.Second)
	require.NoError(t, err)
	assert.Equal(t, lay(d).config(), res.Path)
	assert.False(t, res.Existed)
	assert.Equal(t, record.DefaultMaximumInProgress, res.New)
	cfg, exists, err := d.Logs.LoadConfig()
	require.NoError(t, err)
	assert.True(t, exists)
	assert.Equal(t, record.DefaultMaximumInProgress, cfg.MaximumInProgress)
	fi, err := os.Stat(lay(d).config())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	for _, dir := range []string{d.Logs.Root(), lay(d).activeDir(), lay(d).ownersDir()} {
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), dir)
	}

	// With --max: changed.
	res, err = d.Admin().Init(2, true, nil, time.Second)
	require.NoError(t, err)
	assert.True(t, res.Existed)
	assert.Equal(t, record.DefaultMaximumInProgress, res.Old)
	assert.Equal(t, 2, res.New)

	// Again without --max: kept, and the file is not rewritten.
	before, err := os.ReadFile(lay(d).config())
	require.NoError(t, err)
	res, err = d.Admin().Init(7, false, nil, time.Second)
	require.NoError(t, err)
	assert.True(t, res.Existed)
	assert.Equal(t, 2, res.Old)
	assert.Equal(t, 2, res.New)
	after, err := os.ReadFile(lay(d).config())
	require.NoError(t, err)
	assert.Equal(t, before, after)

	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	assert.Equal(t, 2, snap.MaximumInProgress)
	assert.True(t, snap.ConfigExists)
}

// The new cap applies to the next admission, also while runs are active.
func TestInitChangesTheCapForTheNextAdmission(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	admit(t, d, "a")
	_, err := d.Admit(context.Background(), admitReq("b"))
	var refused *vocab.RefusedError
	require.ErrorAs(t, err, &refused)

	setCap(t, d, 2)
	b := admit(t, d, "b")
	assert.Equal(t, 2, b.Rec.MaximumInProgress)
	assert.Equal(t, 1, b.Rec.SlotsInUse)
}

func TestInitCorruptConfig(t *testing.T) {
	d := newDispatcher(t)
	require.NoError(t, d.Logs.Ensure())
	require.NoError(t, os.WriteFile(lay(d).config(), []byte("{oops"), 0o600))

	_, err := d.Admin().Init(3, false, nil, time.Second)
	var cfgErr *vocab.ConfigError
	require.ErrorAs(t, err, &cfgErr, "without --max there is nothing to put in its place")
	b, err := os.ReadFile(lay(d).config())
	require.NoError(t, err)
	assert.Equal(t, "{oops", string(b), "and the file is left as it was")

	res, err := d.Admin().Init(3, true, []vocab.PoolChange{{Name: "test", Max: 2}}, time.Second)
	require.NoError(t, err, "--max repairs it")
	assert.False(t, res.Existed)
	assert.Equal(t, 3, res.New)
	assert.Equal(t, map[string]int{"test": 2}, res.Pools)
	// The broken file is kept, not dropped silently: it may hold pools.
	assert.Regexp(t, `^`+regexp.QuoteMeta(lay(d).config())+`\.broken-\d{8}T\d{6}Z$`, res.MovedAside)
	assert.Equal(t, lay(d).config()+":1:2: malformed JSON: invalid character 'o' looking for beginning of object key string", res.Broken)
	b, err = os.ReadFile(res.MovedAside)
	require.NoError(t, err)
	assert.Equal(t, "{oops", string(b))
	cfg, _, err := d.Logs.LoadConfig()
	require.NoError(t, err)
	assert.Equal(t, 3, cfg.MaximumInProgress)
}

func TestInitWaitsForTheAdmissionLock(t *testing.T) {
	d := newDispatcher(t)
	require.NoError(t, d.Logs.Ensure())
	lock, err := runstore.New(d.Logs.Root()).LockAdmission(context.Background(), time.Second)
	require.NoError(t, err)
	defer lock.Release()

	_, err = d.Admin().Init(3, true, nil, 50*time.Millisecond)
	var timeout *vocab.LockTimeoutError
	require.ErrorAs(t, err, &timeout)
	assert.NoFileExists(t, lay(d).config())
}
