package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// historyJSON is `crew history --json`.
type historyJSON struct {
	Version  int       `json:"version"`
	Runs     []runJSON `json:"runs"`
	Problems []struct {
		Path  string `json:"path"`
		Error string `json:"error"`
	} `json:"problems"`
}

func (e *env) history(args ...string) historyJSON {
	e.t.Helper()
	r := e.run(append([]string{"history", "--json"}, args...)...)
	require.Equal(e.t, 0, r.Code, "crew history: %s", r.Stderr)
	var h historyJSON
	require.NoError(e.t, json.Unmarshal([]byte(r.Stdout), &h), r.Stdout)
	return h
}

func tasksOf(runs []runJSON) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.Task
	}
	return out
}

// crew status and crew history list finished runs newest finish first,
// not newest created first: a long run started before quick ones is
// listed first once it ends last.
func TestFinishedRunsByFinish(t *testing.T) {
	e := newEnv(t)
	release, long := e.holdSlot("long")
	for i := range 3 {
		require.Equal(t, 0, e.run("start", fmt.Sprintf("quick-%d", i), "--", "true").Code)
	}
	require.Equal(t, 2, e.run("start", "fails", "--", "sh", "-c", "exit 2").Code)
	release()
	require.Equal(t, 0, long.wait(t, 10*time.Second).Code)

	want := []string{"long", "fails", "quick-2", "quick-1", "quick-0"}
	assert.Equal(t, want, tasksOf(e.status().Finished), "status: newest finish first")
	h := e.history()
	assert.Equal(t, 1, h.Version)
	assert.Equal(t, want, tasksOf(h.Runs), "history: newest finish first")
	assert.Empty(t, h.Problems)
	for _, r := range h.Runs {
		assert.NotNil(t, r.FinishedAt, r.Task)
		assert.NotNil(t, r.StartedAt, r.Task)
	}
	assert.Equal(t, []string{"fails"}, tasksOf(e.history("--failed").Runs))
	assert.Equal(t, []string{"quick-1"}, tasksOf(e.history("quick-1").Runs))
	assert.Equal(t, want[:2], tasksOf(e.history("--limit", "2").Runs))
	assert.Equal(t, want, tasksOf(e.history("--since", "1h", "--limit", "0").Runs))
	assert.Empty(t, e.history("no-such-task").Runs)

	// The text: state, exit code, start, duration and reason, newest
	// finish first, every row within 80 columns in a pipe.
	r := e.run("history")
	require.Equal(t, 0, r.Code, r.Stderr)
	lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	require.Len(t, lines, 6, r.Stdout)
	assert.Regexp(t, `^  ID +TASK +STATE +EXIT +STARTED +TOOK +REASON$`, lines[0])
	assert.Regexp(t, `^  [0-9a-f]{8}  long +succeeded +0  \d\d:\d\d:\d\d +\S+$`, lines[1])
	assert.Regexp(t, `^  [0-9a-f]{8}  fails +failed +2  \d\d:\d\d:\d\d +\S+  command exited with stat`, lines[2])
	for _, l := range lines {
		assert.LessOrEqual(t, len([]rune(l)), 80, l)
	}
	r = e.run("history", "no-such-task")
	assert.Equal(t, "no finished runs\n", r.Stdout)
}

func TestHistoryErrors(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"history", "--limit", "-1"}, "crew: --limit must be 0 (no limit) or more, not -1"},
		{[]string{"history", "--limit", "ten"}, `crew: --limit "ten": not a whole number`},
		{[]string{"history", "--since", "5"}, `crew: --since "5": not a duration; give a number and a unit, as in --since=5s`},
		{[]string{"history", "--since", "-1h"}, "crew: --since must not be negative, not -1h0m0s"},
		{[]string{"history", "bad\nname"}, "crew: invalid task name: "},
		{[]string{"history", "a", "b"}, "crew: accepts at most 1 arg(s), received 2"},
	} {
		r := e.run(c.args...)
		assert.Equal(t, 64, r.Code, "%v: %s", c.args, r.Stderr)
		assert.Contains(t, r.Stderr, c.want, "%v", c.args)
		assert.Empty(t, r.Stdout, "%v", c.args)
	}
	// On a state root that does not exist yet: nothing, and nothing made.
	r := e.run("history")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "no finished runs\n", r.Stdout)
	assert.Empty(t, r.Stderr, "no note about a missing index where no run ever finished")
	assert.NoDirExists(t, e.root)
}

// The index of finished runs is derived: without it (removed, or taken
// out of use by an append that failed on a full disk) status and history
// still list every run from the records, history says so, and crew
// recover builds it anew.
func TestHistoryWithoutTheIndex(t *testing.T) {
	e := newEnv(t)
	for i := range 3 {
		require.Equal(t, 0, e.run("start", fmt.Sprintf("t%d", i), "--", "true").Code)
	}
	index := filepath.Join(e.root, "runs", "finished.idx")
	require.FileExists(t, index)
	// An append that fails (a full disk) removes the index rather than
	// leave it silently incomplete.
	r := e.runEnv([]string{"CREW_FAILPOINT=index-append:error:ENOSPC"}, "start", "t3", "--", "true")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.NoFileExists(t, index)

	want := []string{"t3", "t2", "t1", "t0"}
	assert.Equal(t, want, tasksOf(e.status().Finished))
	r = e.run("history", "--json")
	require.Equal(t, 0, r.Code)
	assert.Contains(t, r.Stderr, "crew: note: there is no index of finished runs ("+index+"), so these runs were found from their records (slower); `crew recover` builds it")
	var h historyJSON
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &h))
	assert.Equal(t, want, tasksOf(h.Runs))

	rep, rr := e.recover()
	require.Equal(t, 0, rr.Code, rr.Stderr)
	require.Equal(t, []string{"indexed"}, rep.outcomesFor(""), "%+v", rep)
	assert.FileExists(t, index)
	r = e.run("history")
	assert.Empty(t, r.Stderr)
	assert.Equal(t, want, tasksOf(e.history().Runs))
	rep, _ = e.recover()
	assert.Empty(t, rep.Items, "a second recover finds nothing to do")
}

// Whatever is planted where the index belongs (a link to a file outside
// the state root, a FIFO, a directory, a second hard link) is neither
// followed nor written through: it is moved into quarantine/ by the next
// finish, status and history never hang on it, and recover builds a real
// index.
func TestPlantedIndex(t *testing.T) {
	for _, kind := range []string{"symlink", "FIFO", "directory", "hard link"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			require.Equal(t, 0, e.run("start", "before", "--", "true").Code)
			c := newCanaries(t, filepath.Dir(e.root), map[string]string{"target": "QXZ-canary"})
			index := filepath.Join(e.root, "runs", "finished.idx")
			require.NoError(t, os.Remove(index))
			switch kind {
			case "symlink":
				symlinkAt(t, c.file("target"), index)
			case "FIFO":
				mkfifoAt(t, index)
			case "directory":
				require.NoError(t, os.Mkdir(index, 0o700))
			case "hard link":
				hardlinkAt(t, c.file("target"), index)
			}
			c.before = c.snapshot()
			for _, args := range [][]string{{"status"}, {"history"}, {"start", "after", "--", "true"}, {"history"}, {"status", "--json"}} {
				r := e.bounded(hangLimit, nil, args...)
				assert.Equal(t, 0, r.Code, "%v: %s", args, r.Stderr)
				assert.NotContains(t, r.Stdout+r.Stderr, "QXZ-canary", "%v", args)
			}
			assert.Equal(t, []string{"after", "before"}, tasksOf(e.history().Runs))
			rep, rr := e.recover()
			require.Equal(t, 0, rr.Code, "%s\n%+v", rr.Stderr, rep)
			assert.Equal(t, []string{"after", "before"}, tasksOf(e.history().Runs))
			fi, err := os.Lstat(index)
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular(), "recover made a real index: %v", fi.Mode())
			names, _ := filepath.Glob(filepath.Join(e.root, "quarantine", "finished.idx*"))
			assert.NotEmpty(t, names, "what was planted was moved into quarantine/")
			c.assertUnchanged(kind)
		})
	}
}
