package dispatch_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/vocab"
)

// A hand-broken crew.json neither empties the queue nor admits anyone:
// waiters keep their place (and a new one lines up), hear why they wait,
// and go in order once `crew init --max` repairs it.
func TestBrokenConfigKeepsTheQueue(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	holder := admit(t, d, "holder")
	first := startWaiter(t, d, "first", "", 0)
	require.NoError(t, os.WriteFile(lay(d).config(), []byte("{\"version\": 1,\n  \"maximumInProgress\": x}"), 0o600))
	releaseAll(holder) // a slot frees up, but nothing can be decided
	second := startWaiter(t, d, "second", "", 0)

	p := second.lastProgress()
	assert.Equal(t, admission.WaitConfig, p.Reason)
	assert.Equal(t, 2, p.Position)
	assert.True(t, strings.HasPrefix(p.ConfigErr, lay(d).config()+":2:24: malformed JSON: "), p.ConfigErr)
	snap, err := d.Status(vocab.StatusQuery{})
	require.NoError(t, err)
	require.Len(t, snap.Queue, 2)
	for i, q := range snap.Queue {
		assert.Equal(t, admission.WaitConfig, q.WaitingFor)
		assert.Equal(t, i+1, q.Position)
	}
	assert.False(t, first.finished())
	waitFor(t, "the first waiter to retry and see the problem", 10*time.Second, func() bool {
		return first.lastProgress().ConfigErr != ""
	})

	res, err := d.Admin().Init(1, true, nil, time.Second)
	require.NoError(t, err)
	assert.NotEmpty(t, res.MovedAside)
	first.await(t)
	require.NoError(t, first.err)
	assert.Equal(t, "first", first.res.Rec.Task, "the oldest waiter goes first")
	assert.False(t, second.finished(), "cap 1: the second still waits")
	waitFor(t, "the second waiter to see the config fixed (at its next poll)", 10*time.Second, func() bool {
		return second.lastProgress().ConfigErr == "" && second.lastProgress().Reason == admission.WaitSlot
	})
}

// A plain start refuses at once with the config error, and a waiting
// start that gives up says it was the config.
func TestBrokenConfigPlainAndTimedStarts(t *testing.T) {
	d := newDispatcher(t)
	require.NoError(t, d.Logs.Ensure())
	require.NoError(t, os.WriteFile(lay(d).config(), []byte(`{"version": 1}`), 0o600))
	_, err := d.Admit(t.Context(), admitReq("plain"))
	var ce *vocab.ConfigError
	require.ErrorAs(t, err, &ce)
	w := startWaiter(t, d, "timed", "", 100*time.Millisecond)
	w.await(t)
	require.ErrorAs(t, w.err, &ce)
	assert.Contains(t, w.err.Error(), "not admitted: gave up after waiting 100ms in the queue, all along unable to decide: "+lay(d).config()+": maximumInProgress is 0")
	assert.Empty(t, queueFiles(t, d), "its ticket is gone")
}
