package dispatch_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// finishRun admits and finishes a run of task, and returns its id.
func finishRun(t *testing.T, d *dispatch.Dispatcher, task string) record.RunID {
	t.Helper()
	res := admit(t, d, task)
	rec := *res.Rec
	code := 0
	rec.Finish(record.Succeeded, time.Now().UTC(), &code, "")
	require.NoError(t, res.Run.(*runstore.RunLocks).Finish(&rec))
	return rec.RunID
}

// Lookup's order: a whole id; a beginning of one (r- and a digit); a task
// that has runs; a short id; else a task (with no runs yet).
func TestLookup(t *testing.T) {
	d := newDispatcher(t)
	build := finishRun(t, d, "build")
	test := finishRun(t, d, "test")
	active := admit(t, d, "deploy").Rec.RunID

	for arg, want := range map[string]vocab.Ref{
		string(build):           {Run: build},
		string(build)[:40]:      {Run: build},
		build.Short():           {Run: build},
		build.Short()[:4]:       {Run: build},
		string(active)[:40]:     {Run: active},
		active.Short():          {Run: active},
		"build":                 {Task: "build"},
		"never-ran":             {Task: "never-ran"},
		"0123456789abcdef"[:12]: {Task: "0123456789ab"}, // hex, no run's: a task with no runs
	} {
		got, err := d.Lookup(arg)
		require.NoError(t, err, arg)
		assert.Equal(t, want, got, arg)
	}

	// A task whose name is hex and has runs is that task, even where it
	// begins another run's short id.
	cafe := finishRun(t, d, test.Short()[:6])
	got, err := d.Lookup(test.Short()[:6])
	require.NoError(t, err)
	assert.Equal(t, vocab.Ref{Task: test.Short()[:6]}, got)
	id, err := d.Resolve(test.Short()[:6])
	require.NoError(t, err)
	assert.Equal(t, cafe, id, "the task's latest run")
	id, err = d.Resolve(test.Short())
	require.NoError(t, err)
	assert.Equal(t, test, id, "more digits: the run")

	// A beginning shared by every run is ambiguous, and the error lists them.
	common := string(build)[:12] // r-YYYYMMDDTH: the same hour, most likely
	if strings.HasPrefix(string(active), common) && strings.HasPrefix(string(test), common) {
		_, err = d.Lookup(common)
		var amb *vocab.AmbiguousError
		require.True(t, errors.As(err, &amb), "%v", err)
		assert.Equal(t, 4, len(amb.Candidates)+amb.More)
		for _, want := range []record.RunID{build, test, active} {
			assert.Contains(t, err.Error(), string(want))
		}
		assert.Contains(t, err.Error(), "give more of the id")
	}

	_, err = d.Lookup("r-1999")
	var nf *vocab.NotFoundError
	require.True(t, errors.As(err, &nf), "%v", err)
	assert.Contains(t, err.Error(), "no run's id begins with r-1999")
	_, err = d.Resolve("never-ran")
	require.True(t, errors.As(err, &nf), "%v", err)
	_, err = d.Lookup("bad\nname")
	var usage *vocab.UsageError
	require.True(t, errors.As(err, &usage), "%v", err)
}
