package e2e

// Issue 23: history and retention never lose or hide a run, and crew logs
// says when a run has no output to show.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A run whose command was never started (not found: 127) has no output:
// crew logs says so and exits 1, as docs/usage.md promises; logs -f exits
// like crew wait. A run that started and printed nothing is not such a
// run: its empty log prints nothing, exit 0.
func TestLogsOfARunThatNeverStarted(t *testing.T) {
	e := newEnv(t)
	r := e.run("start", "missing", "--", "/nonexistent/command")
	require.Equal(t, 127, r.Code, r.Stderr)
	id := e.finishedRun("missing").RunID

	for _, arg := range []string{"missing", id} {
		r = e.run("logs", arg)
		assert.Equal(t, 1, r.Code, "crew logs %s: %s", arg, r.Stderr)
		assert.Equal(t, "crew: missing: run "+id+" has no log (it never started a command)\n", r.Stderr)
		assert.Empty(t, r.Stdout)
	}
	r = e.run("logs", "-f", "missing")
	assert.Equal(t, 127, r.Code, "logs -f exits like crew wait: %s", r.Stderr)
	assert.Empty(t, r.Stdout)

	require.Equal(t, 0, e.run("start", "quiet", "--", "true").Code)
	r = e.run("logs", "quiet")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Empty(t, r.Stdout+r.Stderr)
}

// indexPath is the index of finished runs of a state root.
func indexPath(root string) string { return filepath.Join(root, "runs", "finished.idx") }

// restampIndexEntry rewrites the index's last entry of run id with its
// append stamp (the line's first field, ns since 1970) made by stamp from
// the one it has, as a clock stepped back (or a hand) would have written
// it. An entry is "\n<appended>\t...\t<crc32 of the fields, hex>\n".
func restampIndexEntry(t *testing.T, root, id string, stamp func(old int64) int64) {
	t.Helper()
	data, err := os.ReadFile(indexPath(root))
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Split(lines[i], "\t")
		if len(f) != 8 || f[3] != id {
			continue
		}
		old, err := strconv.ParseInt(f[0], 10, 64)
		require.NoError(t, err)
		f[0] = strconv.FormatInt(stamp(old), 10)
		body := strings.Join(f[:7], "\t")
		lines[i] = fmt.Sprintf("%s\t%08x", body, crc32.ChecksumIEEE([]byte(body)))
		require.NoError(t, os.WriteFile(indexPath(root), []byte(strings.Join(lines, "\n")), 0o600))
		return
	}
	t.Fatalf("no entry of run %s in the index", id)
}

// One index entry stamped early hides nothing from history --since:
// whether a clock set back two hours wrote it, or it says 1677, every run
// that finished in range is listed, and the stamps out of order are
// reported; crew recover rebuilds the index in order, after which nothing
// is reported and a second recover has nothing to do.
func TestHistorySinceWithAnEntryStampedEarly(t *testing.T) {
	for _, c := range []struct {
		name  string
		stamp func(int64) int64
		since string
	}{
		{"clock set back", func(old int64) int64 { return old - int64(2*60*60*1e9) }, "1h"},
		{"year 1677", func(int64) int64 { return -9223372036854775807 }, "100000d"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			for i := range 3 {
				require.Equal(t, 0, e.run("start", fmt.Sprintf("t%d", i), "--", "true").Code)
			}
			want := []string{"t2", "t1", "t0"}
			restampIndexEntry(t, e.root, e.finishedRun("t2").RunID, c.stamp)

			h := e.history("--since", c.since)
			assert.Equal(t, want, tasksOf(h.Runs), "every run that finished within %s", c.since)
			require.Len(t, h.Problems, 1, "%+v", h.Problems)
			assert.Equal(t, indexPath(e.root), h.Problems[0].Path)
			assert.Contains(t, h.Problems[0].Error, "entries stamped out of order")
			assert.Equal(t, want, tasksOf(e.status().Finished))

			rep, r := e.recover()
			require.Equal(t, 0, r.Code, r.Stderr)
			require.Len(t, rep.Items, 1, "%+v", rep.Items)
			assert.Equal(t, "indexed", rep.Items[0].Outcome)
			assert.Contains(t, rep.Items[0].Reason, "built the index of finished runs anew from their records, 3 runs (its entries were stamped out of order")
			h = e.history("--since", c.since)
			assert.Equal(t, want, tasksOf(h.Runs))
			assert.Empty(t, h.Problems)
			rep, _ = e.recover()
			assert.Empty(t, rep.Items, "a second recover finds nothing to do")
		})
	}
}

// Junk in the index (a tail of 16 MiB without a newline, which anyone who
// may write the state root can append) is skipped: status and history
// list every run and report it, and crew recover drops it.
func TestIndexJunkIsSkippedReportedAndRepaired(t *testing.T) {
	e := newEnv(t)
	for i := range 3 {
		require.Equal(t, 0, e.run("start", fmt.Sprintf("t%d", i), "--", "true").Code)
	}
	f, err := os.OpenFile(indexPath(e.root), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(append([]byte("\nnot an entry\n"), bytes.Repeat([]byte{'x'}, 16<<20)...))
	require.NoError(t, err)
	require.NoError(t, f.Close())

	want := []string{"t2", "t1", "t0"}
	const junk = "has 2 line(s) that are not entries crew wrote (skipped); `crew recover` repairs it"
	s := e.status()
	assert.Equal(t, want, tasksOf(s.Finished))
	require.Len(t, s.Problems, 1)
	assert.Equal(t, indexPath(e.root), s.Problems[0].Path)
	assert.Contains(t, s.Problems[0].Error, junk)
	h := e.history("--since", "1h")
	assert.Equal(t, want, tasksOf(h.Runs))
	require.Len(t, h.Problems, 1)
	assert.Contains(t, h.Problems[0].Error, junk)
	r := e.run("history")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stdout, "\nProblems:\n  the index of finished runs "+indexPath(e.root)+" "+junk+"\n")

	rep, r := e.recover()
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Len(t, rep.Items, 1, "%+v", rep.Items)
	assert.Equal(t, "dropped 2 line(s) that were not entries from the index of finished runs", rep.Items[0].Reason)
	fi, err := os.Stat(indexPath(e.root))
	require.NoError(t, err)
	assert.Less(t, fi.Size(), int64(4096), "the junk is gone")
	h = e.history()
	assert.Equal(t, want, tasksOf(h.Runs))
	assert.Empty(t, h.Problems)
	rep, _ = e.recover()
	assert.Empty(t, rep.Items, "a second recover finds nothing to do")
}

// Finished records crew cannot read (an exit code of 1e20, an unknown
// state, a control character in the task) never vanish silently: history
// lists them under problems with their paths, in its text and its JSON.
// Records planted where the index does not list them are indexed by crew
// recover, which says it cannot read them; history then lists them too,
// with --failed as well.
func TestHistoryListsUnreadableRecords(t *testing.T) {
	e := newEnv(t)
	for i := range 4 {
		require.Equal(t, 0, e.run("start", fmt.Sprintf("t%d", i), "--", "true").Code)
	}
	breakages := []struct{ from, to, err string }{
		{`"exitCode": 0`, `"exitCode": 1e20`, "is a JSON number 1e20"},
		{`"state": "succeeded"`, `"state": "weird"`, `unknown state "weird"`},
		{`"task": "t2"`, `"task": "t2\u0007x"`, "has a control character"},
	}
	var paths []string
	for i, b := range breakages {
		id := e.finishedRun(fmt.Sprintf("t%d", i)).RunID
		path := doneRecordPath(t, e.root, id)
		data := readRecordJSON(t, path)
		require.Contains(t, string(data), b.from)
		// Broken inside a whole slot (its checksum right): the record
		// itself is what is wrong.
		writeRecordJSON(t, path, bytes.Replace(data, []byte(b.from), []byte(b.to), 1))
		paths = append(paths, path)
	}
	assertListed := func(h historyJSON, paths []string) {
		t.Helper()
		var got []string
		for _, p := range h.Problems {
			got = append(got, p.Path)
		}
		assert.ElementsMatch(t, paths, got, "%+v", h.Problems)
	}
	h := e.history()
	assert.Equal(t, []string{"t3"}, tasksOf(h.Runs))
	assertListed(h, paths)
	r := e.run("history")
	require.Equal(t, 0, r.Code, r.Stderr)
	text := r.Stdout[strings.Index(r.Stdout, "\nProblems:\n"):]
	for i, b := range breakages {
		assert.Contains(t, text, "  run record "+paths[i]+": ", "text lists %s", paths[i])
		assert.Contains(t, text, b.err)
	}

	// Copies of the broken records under ids of their own, which no index
	// entry names.
	var planted []string
	for i, p := range paths {
		id, _ := recordIDOf(filepath.Base(p))
		copyID := id[:len(id)-16] + fmt.Sprintf("%016x", 0xdead0+i)
		data := readRecordJSON(t, p)
		dest := filepath.Join(filepath.Dir(p), copyID+".run")
		writeRecordJSON(t, dest, bytes.ReplaceAll(data, []byte(id), []byte(copyID)))
		planted = append(planted, dest)
	}
	rep, r := e.recover()
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Len(t, rep.Items, 1, "%+v", rep.Items)
	assert.Contains(t, rep.Items[0].Reason, "indexed 3 finished run(s) that the index of finished runs lacked")
	assert.Contains(t, rep.Items[0].Reason, "and 3 whose record changed after it was indexed (6 of them cannot be read: status and history list them as problems)")
	all := append(append([]string{}, paths...), planted...)
	assertListed(e.history(), all)
	assertListed(e.history("--failed"), all)
	rep, _ = e.recover()
	assert.Empty(t, rep.Items, "a second recover finds nothing to do")
}

// lineUp runs n starts that wait in line at cap 1 behind a held slot,
// each joining once the one before it is in line, and returns their tasks
// in the order their commands ran (and finished: one at a time).
func (e *env) lineUp(n int) []string {
	e.t.Helper()
	release, holder := e.holdSlot("holder")
	order := filepath.Join(e.dir, "order")
	var waiters []*proc
	for i := range n {
		task := fmt.Sprintf("q%02d", i)
		waiters = append(waiters, e.start(nil, "start", "--wait", task, "--", "sh", "-c", `echo "$1" >> "$2"`, "x", task, order))
		e.waitQueued(task)
	}
	release()
	require.Equal(e.t, 0, holder.wait(e.t, 10*time.Second).Code)
	for _, w := range waiters {
		r := w.wait(e.t, 60*time.Second)
		require.Equal(e.t, 0, r.Code, r.Stderr)
	}
	data, err := os.ReadFile(order)
	require.NoError(e.t, err)
	return strings.Fields(string(data))
}

// tasksOnDisk lists the tasks of the finished records in runs/done/.
func tasksOnDisk(t *testing.T, root string) []string {
	t.Helper()
	var tasks []string
	for _, id := range finishedOnDisk(t, root) {
		data := readRecordJSON(t, doneRecordPath(t, root, id))
		var rec struct {
			Task string `json:"task"`
		}
		require.NoError(t, json.Unmarshal(data, &rec))
		tasks = append(tasks, rec.Task)
	}
	return tasks
}

// Retention counts runs by when they finished: starts that waited in line
// (each run id made when its start joined the line, all before any of
// them ran) leave the 5 that finished last with --retain 5, and crew
// prune, with the retention set afterwards, removes all but those 5.
func TestRetainCountsRunsThatWaitedInLine(t *testing.T) {
	const n, retain = 16, 5
	t.Run("lazily", func(t *testing.T) {
		e := newEnv(t)
		require.Equal(t, 0, e.run("init", "--max", "1", "--retain", strconv.Itoa(retain)).Code)
		ran := e.lineUp(n)
		require.Len(t, ran, n)
		assert.ElementsMatch(t, ran[n-retain:], tasksOnDisk(t, e.root), "the runs that finished last")
		assertNoOrphanedLogs(t, e.root)
	})
	t.Run("crew prune", func(t *testing.T) {
		e := newEnv(t)
		e.initMax(1)
		ran := e.lineUp(n)
		require.Len(t, finishedOnDisk(t, e.root), n+1, "no retention: every run is kept, the holder's too")
		require.Equal(t, 0, e.run("init", "--retain", strconv.Itoa(retain)).Code)
		r := e.run("prune", "--dry-run")
		require.Equal(t, 0, r.Code, r.Stderr)
		require.Len(t, finishedOnDisk(t, e.root), n+1)
		r = e.run("prune")
		require.Equal(t, 0, r.Code, r.Stderr)
		assert.Contains(t, r.Stdout, fmt.Sprintf("removed %d finished run(s)", n+1-retain))
		assert.ElementsMatch(t, ran[n-retain:], tasksOnDisk(t, e.root))
		assertNoOrphanedLogs(t, e.root)
	})
}

// --retain-for D removes a run once it finished more than D ago, at the
// next finish, not once the hour it was created in has gone by.
func TestRetainForIsNotAnHourLate(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 0, e.run("init", "--retain-for", "1s").Code)
	for _, task := range []string{"a", "b"} {
		require.Equal(t, 0, e.run("start", task, "--", "true").Code)
	}
	b := e.finishedRun("b")
	eventually(t, 10*time.Second, "b to have finished more than a second ago", func() bool {
		return time.Since(*b.FinishedAt) > 1500*time.Millisecond
	})
	require.Equal(t, 0, e.run("start", "c", "--", "true").Code)
	assert.Equal(t, []string{"c"}, tasksOnDisk(t, e.root), "a and b finished more than 1s ago")
	assert.Equal(t, []string{"c"}, tasksOf(e.history().Runs))
}

// A waiter (crew wait, crew logs -f) that saw a run running reports its
// own exit code even if, while the waiter was away between two looks, the
// run ended and the next finish's lazy prune (--retain 1) would remove it:
// the waiter holds the run's log, and the prune leaves the run alone
// until the waiter has read it. The failpoint wait-poll holds the waiter
// between two looks.
func TestWaiterOfARunRetentionWouldPrune(t *testing.T) {
	for _, waiter := range [][]string{{"wait"}, {"logs", "-f"}} {
		t.Run(strings.Join(waiter, " "), func(t *testing.T) {
			e := newEnv(t)
			require.Equal(t, 0, e.run("init", "--retain", "1").Code)
			gate, openGate := e.gate("a-ends")
			a := e.start(nil, "start", "a", "--", "sh", "-c", `echo out; while [ ! -e "$1" ]; do sleep 0.01; done; exit 3`, "x", gate)
			e.activeRun("a")
			away, back := e.gate("waiter-away")
			w := e.start([]string{"CREW_FAILPOINT=wait-poll:wait:" + away}, append(waiter, "a")...)
			eventually(t, 10*time.Second, "the waiter to have looked once", func() bool { return exists(away + ".reached") })

			openGate()
			require.Equal(t, 3, a.wait(t, 10*time.Second).Code)
			require.Equal(t, 0, e.run("start", "b", "--", "true").Code)
			assert.ElementsMatch(t, []string{"a", "b"}, tasksOnDisk(t, e.root), "b's prune left a alone while its waiter holds it")

			back()
			r := w.wait(t, 10*time.Second)
			assert.Equal(t, 3, r.Code, "the waiter reports a's own exit code: %s", r.Stderr)
			if waiter[0] == "logs" {
				assert.Equal(t, "out\n", r.Stdout)
			}
			require.Equal(t, 0, e.run("start", "c", "--", "true").Code)
			assert.Equal(t, []string{"c"}, tasksOnDisk(t, e.root), "once the waiter is gone, a goes")
		})
	}
}

// A waiter that saw only a run's place in line, and was away while the
// run was admitted, ran, ended and was pruned, learns its exit code from
// the index of finished runs. If that no longer lists the run either
// (crew prune compacted it away) and the waiter had seen the run, it says
// the run's exit status is unknown (125); that is the only case.
func TestWaiterOfARunPrunedBeforeItsLook(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 0, e.run("init", "--max", "1", "--retain", "1").Code)
	release, holder := e.holdSlot("holder")
	a := e.start(nil, "start", "--wait", "a", "--", "sh", "-c", "exit 3")
	e.waitQueued("a")
	away, back := e.gate("waiter-away")
	w := e.start([]string{"CREW_FAILPOINT=wait-poll:wait:" + away}, "wait", "a")
	eventually(t, 10*time.Second, "the waiter to have looked once", func() bool { return exists(away + ".reached") })
	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	require.Equal(t, 3, a.wait(t, 10*time.Second).Code)
	require.Equal(t, 0, e.run("start", "b", "--", "true").Code)
	require.Equal(t, []string{"b"}, tasksOnDisk(t, e.root), "a was pruned: nothing held it")
	back()
	r := w.wait(t, 10*time.Second)
	assert.Equal(t, 3, r.Code, "the index of finished runs tells a's exit code: %s", r.Stderr)

	// The waiter saw the run; its record goes (by hand), and the index
	// is compacted: nothing is left to tell how it ended.
	gate, openGate := e.gate("c-ends")
	c := e.start(nil, "start", "c", "--", "sh", "-c", `while [ ! -e "$1" ]; do sleep 0.01; done; exit 4`, "x", gate)
	cRun := e.activeRun("c")
	away2, back2 := e.gate("waiter-away-2")
	w = e.start([]string{"CREW_FAILPOINT=wait-poll:wait:" + away2}, "wait", "c")
	eventually(t, 10*time.Second, "the waiter to have looked once", func() bool { return exists(away2 + ".reached") })
	openGate()
	require.Equal(t, 4, c.wait(t, 10*time.Second).Code)
	require.NoError(t, os.Remove(doneRecordPath(t, e.root, cRun.RunID)))
	require.Equal(t, 0, e.run("start", "d", "--", "true").Code)
	pr := e.run("prune", "--keep", "0")
	require.Equal(t, 0, pr.Code, pr.Stderr)
	back2()
	r = w.wait(t, 10*time.Second)
	assert.Equal(t, 125, r.Code)
	assert.Equal(t, "crew: run "+cRun.RunID+" ended, but its record was removed before crew could read it, and the index of finished runs no longer lists it: its exit status is unknown\n", r.Stderr)
}
