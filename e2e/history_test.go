package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	// finish first, whole in a pipe.
	r := e.run("history")
	require.Equal(t, 0, r.Code, r.Stderr)
	lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	require.Len(t, lines, 6, r.Stdout)
	assert.Regexp(t, `^  ID +TASK +STATE +EXIT +STARTED +TOOK +REASON$`, lines[0])
	assert.Regexp(t, `^  [0-9a-f]{8}  long +succeeded +0  \d\d:\d\d:\d\d +\S+$`, lines[1])
	assert.Regexp(t, `^  [0-9a-f]{8}  fails +failed +2  \d\d:\d\d:\d\d +\S+  command exited with stat`, lines[2])
	assert.True(t, strings.HasSuffix(lines[2], "  command exited with status 2"), "in a pipe, rows are not cut: %q", lines[2])
	assert.NotContains(t, r.Stdout, "…")
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

// Issue 24 item 7: a history cut short by --limit says so (text and
// JSON), finished runs carry durationMs, and the times are RFC 3339 UTC,
// which docs/usage.md's jq recipe turns into epoch seconds.
func TestHistorySaysWhenCutShort(t *testing.T) {
	e := newEnv(t)
	for i := range 3 {
		require.Equal(t, 0, e.run("start", "--label", "pipeline=4711", fmt.Sprintf("job-%d", i), "--", "true").Code)
	}
	r := e.run("history", "--limit", "2")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.True(t, strings.HasSuffix(r.Stdout, "\n(the newest 2; more match: --limit 0 shows them all)\n"), r.Stdout)
	for _, args := range [][]string{{"history"}, {"history", "--limit", "3"}, {"history", "--limit", "0"}} {
		r = e.run(args...)
		require.Equal(t, 0, r.Code, r.Stderr)
		assert.NotContains(t, r.Stdout, "more match", "%v lists every run", args)
	}

	var h struct {
		Runs  []map[string]any `json:"runs"`
		Limit int              `json:"limit"`
		More  bool             `json:"more"`
	}
	r = e.run("history", "--json", "--limit", "2")
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &h), r.Stdout)
	assert.Len(t, h.Runs, 2)
	assert.Equal(t, 2, h.Limit)
	assert.True(t, h.More, "a third run matches")
	r = e.run("history", "--json", "--limit", "3")
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &h), r.Stdout)
	assert.False(t, h.More, "every run is listed")

	// durationMs is finishedAt - startedAt, and every time is whole
	// seconds of UTC and a fraction.
	utc := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$`)
	var runs []runJSON
	r = e.run("history", "--json")
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &h), r.Stdout)
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &struct {
		Runs *[]runJSON `json:"runs"`
	}{&runs}))
	for i, v := range h.Runs {
		for _, k := range []string{"createdAt", "startedAt", "finishedAt"} {
			assert.Regexp(t, utc, v[k], k)
		}
		want := runs[i].FinishedAt.Sub(*runs[i].StartedAt).Milliseconds()
		assert.EqualValues(t, want, v["durationMs"], "durationMs of %s", runs[i].Task)
	}
	var status struct {
		Finished []map[string]any `json:"finished"`
	}
	r = e.run("status", "--json")
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &status), r.Stdout)
	require.NotEmpty(t, status.Finished)
	assert.Equal(t, h.Runs[0]["durationMs"], status.Finished[0]["durationMs"], "status's finished runs have it too")
	assert.NotNil(t, status.Finished[0]["durationMs"])

	// docs/usage.md's recipe, as written.
	jq, err := exec.LookPath("jq")
	if err != nil {
		t.Skip("jq is not installed: the recipe's times are checked above by their format only")
	}
	usage, err := os.ReadFile("../docs/usage.md")
	require.NoError(t, err)
	recipe := regexp.MustCompile(`(?m)^crew history .*\| jq .*$`).FindString(string(usage))
	require.NotEmpty(t, recipe, "docs/usage.md's jq recipe")
	cmd := exec.Command("sh", "-c", e.bin+strings.TrimPrefix(recipe, "crew"))
	cmd.Env = append(e.environ(), "PATH="+filepath.Dir(jq)+":/usr/bin:/bin")
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Len(t, lines, 3, string(out))
	for i, l := range lines {
		want := fmt.Sprintf("%s\tsucceeded\t0\t%d\t%d", runs[i].Task, runs[i].StartedAt.Unix(), runs[i].FinishedAt.Sub(*runs[i].StartedAt).Milliseconds())
		assert.Equal(t, want, l)
	}
}
