package e2e

// Issue 14: a state root that stays bounded on its own (retention, lazily
// pruned; log caps; its size in status), and issue 12's --tag, durations
// with days and task-named lines.

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// finishedOnDisk lists the finished runs' ids from runs/done/*/ (as an
// outsider: status shows only the last 10).
func finishedOnDisk(t *testing.T, root string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "runs", "done", "*", "r-*"))
	require.NoError(t, err)
	var ids []string
	for _, p := range paths {
		if id, ok := recordIDOf(filepath.Base(p)); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// assertNoOrphanedLogs checks that every log (and capped log's tail)
// belongs to a run that has a record, active or finished.
func assertNoOrphanedLogs(t *testing.T, root string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "logs"))
	require.NoError(t, err)
	active, done := runIDsOnDisk(t, root)
	has := map[string]bool{}
	for _, id := range append(active, done...) {
		has[id] = true
	}
	for _, ent := range entries {
		id := strings.TrimSuffix(strings.TrimSuffix(ent.Name(), ".log"), ".tail")
		assert.True(t, has[id], "orphaned log %s", ent.Name())
	}
}

// 200 starts, four at a time, with --retain 20: each finishing run prunes
// a few, so the state root never holds more than 20 finished runs plus the
// bounded lag (runs that overlapped the newest 20 are kept until 20 runs
// began after they ended: at most maximumInProgress of them), no log
// outlives its record, and recover finds nothing to clean.
func TestRetainBoundsTheStateRoot(t *testing.T) {
	e := newEnv(t)
	const retain, maxInProgress, starts, workers = 20, 4, 200, 4
	r := e.run("init", "--max", strconv.Itoa(maxInProgress), "--retain", strconv.Itoa(retain))
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: retention: keep the newest 20 finished runs")

	var wg sync.WaitGroup
	errs := make(chan error, starts)
	maxSeen := 0
	var mu sync.Mutex
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range starts / workers {
				res, err := e.tryRun("start", "--wait", fmt.Sprintf("w%d-%d", w, i), "--", "true")
				if err == nil && res.Code != 0 {
					err = fmt.Errorf("start %d/%d: exit %d: %s", w, i, res.Code, res.Stderr)
				}
				if err != nil {
					errs <- err
					return
				}
				if w == 0 && i%10 == 9 {
					// Look in between, as an operator would.
					paths, _ := filepath.Glob(filepath.Join(e.root, "runs", "done", "*", "r-*.run"))
					mu.Lock()
					maxSeen = max(maxSeen, len(paths))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	done := finishedOnDisk(t, e.root)
	assert.LessOrEqual(t, len(done), retain+maxInProgress, "finished runs after 200 starts")
	assert.GreaterOrEqual(t, len(done), retain, "the newest 20 are kept")
	assert.LessOrEqual(t, maxSeen, retain+2*maxInProgress, "finished runs at any time (up to maxInProgress more may have just finished, their prunes not yet done)")
	assertNoOrphanedLogs(t, e.root)
	rep, rr := e.recover()
	require.Equal(t, 0, rr.Code, rr.Stderr)
	assert.Zero(t, rep.changes(), "nothing for recover to clean: %+v", rep.Items)

	// crew prune without flags applies the same policy in full: nothing
	// more to do.
	pr := e.run("prune", "--json")
	require.Equal(t, 0, pr.Code, pr.Stderr)
	var prep struct {
		Removed []struct{ RunID string } `json:"removed"`
		Kept    int                      `json:"kept"`
	}
	require.NoError(t, json.Unmarshal([]byte(pr.Stdout), &prep))
	assert.Equal(t, len(done), prep.Kept+len(prep.Removed))
	assert.GreaterOrEqual(t, prep.Kept, retain)
}

// Sequential starts keep exactly the newest N; lowering N takes effect at
// the next finish (a bounded step) and in full at crew prune.
func TestRetainKeepsExactlyTheNewest(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 0, e.run("init", "--retain", "5").Code)
	var ids []string
	for i := range 12 {
		require.Equal(t, 0, e.run("start", fmt.Sprintf("t%d", i), "--", "true").Code)
		ids = append(ids, e.finishedRun(fmt.Sprintf("t%d", i)).RunID)
	}
	assert.ElementsMatch(t, ids[7:], finishedOnDisk(t, e.root))

	require.Equal(t, 0, e.run("init", "--retain", "2").Code)
	r := e.run("prune")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stdout, "removed 3 finished run(s)")
	assert.ElementsMatch(t, ids[10:], finishedOnDisk(t, e.root))
	assertNoOrphanedLogs(t, e.root)

	// --retain 0 keeps any number again: nothing goes.
	require.Equal(t, 0, e.run("init", "--retain", "0").Code)
	for i := range 3 {
		require.Equal(t, 0, e.run("start", fmt.Sprintf("u%d", i), "--", "true").Code)
	}
	assert.Len(t, finishedOnDisk(t, e.root), 5)
	r = e.run("prune")
	assert.Equal(t, 64, r.Code, "nothing configured, nothing said: %s", r.Stderr)
}

// A lazy prune killed between a run's log and its record (or before it
// removed anything) leaves a record without a log at worst: the run that
// pruned is recorded, recover has nothing to clean, and the next finish
// converges.
func TestKilledLazyPruneConverges(t *testing.T) {
	for _, fp := range []string{"prune-log-removed", "lazy-prune"} {
		t.Run(fp, func(t *testing.T) {
			e := newEnv(t)
			require.Equal(t, 0, e.run("init", "--retain", "3").Code)
			for i := range 3 {
				require.Equal(t, 0, e.run("start", fmt.Sprintf("t%d", i), "--", "true").Code)
			}
			oldest := e.finishedRun("t0")

			killed := e.runEnv([]string{"CREW_FAILPOINT=" + fp + ":kill"}, "start", "victim", "--", "echo", "hi")
			require.Equal(t, 137, killed.Code, "crew start was killed in its lazy prune: %s", killed.Stderr)
			victim := e.finishedRun("victim")
			assert.Equal(t, "succeeded", victim.State, "the run was recorded before its prune began")
			assert.Equal(t, "hi\n", readLog(t, victim))
			assert.Equal(t, 0, e.status().SlotsInUse, "its slot was free before its prune began")
			record := filepath.Join(e.root, "runs", "done", shardOf(t, oldest.RunID), oldest.RunID+".run")
			assert.FileExists(t, record, "the oldest run's record is still there")
			if fp == "prune-log-removed" {
				assert.NoFileExists(t, oldest.LogPath, "its log went first")
			}
			assertNoOrphanedLogs(t, e.root)
			rep, rr := e.recover()
			require.Equal(t, 0, rr.Code, rr.Stderr)
			assert.Zero(t, rep.changes(), "nothing for recover to do: %+v", rep.Items)

			require.Equal(t, 0, e.run("start", "next", "--", "true").Code)
			assert.NoFileExists(t, record, "the next finish took it")
			assert.Len(t, finishedOnDisk(t, e.root), 3)
			assertNoOrphanedLogs(t, e.root)
			rep, _ = e.recover()
			assert.Zero(t, rep.changes(), "converged: %+v", rep.Items)
		})
	}
}

// bigOutput is what `seq -f 'line %010.0f' 1 N` writes: 16 bytes a line.
func bigOutput(lines int) []byte {
	var b bytes.Buffer
	b.Grow(16 * lines)
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&b, "line %010d\n", i)
	}
	return b.Bytes()
}

// markerLine is the marker without the newline that goes before it when
// it follows output that did not end with one.
var markerLine = regexp.MustCompile(`\[crew: (\d+) bytes of output dropped here \(log capped at ([^)]*)\)\]\n`)

// checkCappedLog checks a capped log against the whole output: the head
// exactly, one marker with the right count, then the end of the output.
func checkCappedLog(t *testing.T, log string, out []byte, logMax int) {
	t.Helper()
	head := logMax / 2
	require.True(t, strings.HasPrefix(log, string(out[:head])), "the log starts with the first %d bytes of output", head)
	loc := markerLine.FindStringSubmatchIndex(log)
	require.NotNil(t, loc, "a marker line")
	if out[head-1] != '\n' {
		assert.Equal(t, "\n", log[head:head+1], "the marker starts a line of its own")
		head++
	}
	assert.Equal(t, head, loc[0], "the marker follows the head")
	head = logMax / 2
	dropped, _ := strconv.Atoi(log[loc[2]:loc[3]])
	tail := log[loc[1]:]
	assert.Equal(t, len(out), head+dropped+len(tail), "head + dropped + tail is the whole output")
	assert.True(t, bytes.HasSuffix(out, []byte(tail)), "the log ends with the end of the output")
	if logMax >= 256<<10 {
		assert.GreaterOrEqual(t, len(tail), 3*logMax/8)
	} else {
		assert.GreaterOrEqual(t, len(tail), logMax/4)
	}
	assert.LessOrEqual(t, len(log), logMax+len(log[loc[0]:loc[1]]), "at most the cap, plus the marker")
	assert.Equal(t, 1, strings.Count(log, "[crew: "), "one marker")
}

// 50 MiB through a run with --log-max 1MiB: the terminal gets every byte,
// in order (crew never throttles or drops the command's output to cap
// its log); the log is about 1 MiB with the head, the marker and the
// tail; crew logs and crew logs -f show the same.
func TestLogMaxKeepsHeadMarkerAndTail(t *testing.T) {
	e := newEnv(t)
	const lines = 50 << 20 / 16
	out := bigOutput(lines)
	cmd := e.command(nil, "start", "--log-max", "1MiB", "big", "--", "seq", "-f", "line %010.0f", "1", strconv.Itoa(lines))
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	h := sha256.New()
	n, err := io.Copy(h, stdout)
	require.NoError(t, err)
	require.NoError(t, cmd.Wait(), stderr.String())
	assert.Equal(t, int64(len(out)), n, "every byte reached the terminal")
	assert.Equal(t, sha256.Sum256(out), [32]byte(h.Sum(nil)), "in order")

	run := e.finishedRun("big")
	log := readLog(t, run)
	checkCappedLog(t, log, out, 1<<20)
	assert.InDelta(t, 1<<20, len(log), 1<<17, "about 1 MiB")
	assert.Contains(t, log, "(log capped at 1 MiB)]")
	assert.NoDirExists(t, filepath.Join(e.root, "logs", run.RunID+".tail"), "one file once the run ended")
	var rec struct {
		LogMax int64 `json:"logMax"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.run("status", "--json", run.RunID).Stdout), &rec))
	assert.Equal(t, int64(1<<20), rec.LogMax, "the run records its cap")

	for _, args := range [][]string{{"logs", "big"}, {"logs", "-f", "big"}} {
		r := e.run(args...)
		require.Equal(t, 0, r.Code, r.Stderr)
		assert.True(t, r.Stdout == log, "crew %v shows the log as it is", args)
	}
}

// While a capped run writes, crew logs shows the head, the marker and the
// newest output already; crew logs -f follows it to the end, with a marker
// wherever it fell behind, and never shows a byte twice.
func TestLogMaxWhileRunning(t *testing.T) {
	e := newEnv(t)
	gate, openGate := e.gate("more")
	const lines = 40000 // 640 KB, ten times the cap
	script := fmt.Sprintf(`seq -f 'line %%010.0f' 1 %d; while [ ! -e "$1" ]; do sleep 0.01; done; seq -f 'line %%010.0f' %d %d`, lines/2, lines/2+1, lines)
	p := e.start(nil, "start", "--log-max", "64KiB", "live", "--", "sh", "-c", script, "sh", gate)
	run := e.activeRun("live")
	out := bigOutput(lines)
	eventually(t, 10*time.Second, "the first half to be written", func() bool {
		r := e.run("logs", "live")
		return strings.HasSuffix(r.Stdout, string(out[:len(out)/2][len(out)/2-16:]))
	})
	r := e.run("logs", "live")
	require.Equal(t, 0, r.Code, r.Stderr)
	checkCappedLog(t, r.Stdout, out[:len(out)/2], 64<<10)

	follow := e.start(nil, "logs", "-f", run.RunID)
	openGate()
	require.Equal(t, 0, p.wait(t, 30*time.Second).Code)
	fr := follow.wait(t, 30*time.Second)
	require.Equal(t, 0, fr.Code, fr.Stderr)
	assert.True(t, followed(out, 0, fr.Stdout), "what the follower showed is the output, with markers that count what it missed")
	checkCappedLog(t, readLog(t, e.finishedRun("live")), out, 64<<10)
}

// followed reports whether shown is out[pos:] with stretches replaced by
// markers that count them. A newline just before a marker may be the
// marker's own (after a stretch that ended mid-line): both readings are
// tried.
func followed(out []byte, pos int, shown string) bool {
	loc := markerLine.FindStringSubmatchIndex(shown)
	if loc == nil {
		return string(out[pos:]) == shown
	}
	dropped, _ := strconv.Atoi(shown[loc[2]:loc[3]])
	before := shown[:loc[0]]
	for _, stretch := range []string{before, strings.TrimSuffix(before, "\n")} {
		n := len(stretch)
		if pos+n+dropped <= len(out) && string(out[pos:pos+n]) == stretch && followed(out, pos+n+dropped, shown[loc[1]:]) {
			return true
		}
	}
	return false
}

// The config's logMax caps every run; crew start --log-max overrides it,
// and --log-max 0 asks for no cap.
func TestLogMaxFromTheConfig(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 0, e.run("init", "--log-max", "64KiB").Code)
	out := bigOutput(20000)
	require.Equal(t, 0, e.run("start", "capped", "--", "seq", "-f", "line %010.0f", "1", "20000").Code)
	checkCappedLog(t, readLog(t, e.finishedRun("capped")), out, 64<<10)
	require.Equal(t, 0, e.run("start", "--log-max", "0", "whole", "--", "seq", "-f", "line %010.0f", "1", "20000").Code)
	assert.Equal(t, string(out), readLog(t, e.finishedRun("whole")))
	require.Equal(t, 0, e.run("start", "--log-max", "128KiB", "bigger", "--", "seq", "-f", "line %010.0f", "1", "20000").Code)
	checkCappedLog(t, readLog(t, e.finishedRun("bigger")), out, 128<<10)
	s := e.run("status")
	assert.Contains(t, s.Stdout, "Log cap: 64 KiB per run")
}

// --tag: two runs write partial lines at the same time into one terminal
// (forced: each writes half a line, then waits until the other has, then
// ends its line). Every line arrives whole, tagged with its task; stdout
// and stderr are each tagged; a last line without newline is ended; the
// logs keep the output untagged.
func TestTagKeepsLinesWhole(t *testing.T) {
	e := newEnv(t)
	e.initMax(2)
	a, b := filepath.Join(e.dir, "a-half"), filepath.Join(e.dir, "b-half")
	script := `printf "$1 starts "; touch "$2"; while [ ! -e "$3" ]; do sleep 0.01; done; printf "and ends\n"; printf "$1 err " >&2; printf "line\n" >&2; printf "$1 no newline"`
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	var cmds []*exec.Cmd
	for _, c := range [][]string{{"one", a, b}, {"two", b, a}} {
		cmd := e.command(nil, "start", "--tag", c[0], "--", "sh", "-c", script, "sh", c[0], c[1], c[2])
		cmd.Stdout, cmd.Stderr = pw, pw // one terminal for both, as in a CI log
		require.NoError(t, cmd.Start())
		cmds = append(cmds, cmd)
	}
	pw.Close()
	var got bytes.Buffer
	copied := make(chan error, 1)
	go func() { _, err := io.Copy(&got, pr); copied <- err }()
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait())
	}
	require.NoError(t, <-copied)
	lines := strings.Split(strings.TrimSuffix(got.String(), "\n"), "\n")
	assert.ElementsMatch(t, []string{
		"one\tone starts and ends", "one\tone err line", "one\tone no newline",
		"two\ttwo starts and ends", "two\ttwo err line", "two\ttwo no newline",
	}, lines, "every line whole and tagged: %q", got.String())
	for _, task := range []string{"one", "two"} {
		// The log takes both streams as they come, untagged: each write of
		// the command (one printf, smaller than a pipe's atomic write) is
		// there whole, but stderr's may fall between two of stdout's.
		log := readLog(t, e.finishedRun(task))
		assert.NotContains(t, log, task+"\t", "the log is untagged")
		for _, part := range []string{task + " starts ", "and ends\n", task + " err ", "line\n", task + " no newline"} {
			assert.Contains(t, log, part)
		}
		assert.Len(t, log, len(task+" starts and ends\n"+task+" err line\n"+task+" no newline"))
	}
}

// Every line crew start writes about a run names its task: the waiting
// line, the admitted line, refusals, launch errors.
func TestStartLinesNameTheTask(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	w := e.start(nil, "start", "--wait", "nightly build", "--", "true")
	e.waitQueued("nightly build")
	r := e.run("start", "refused", "--", "true")
	assert.Equal(t, 75, r.Code)
	assert.True(t, strings.HasPrefix(r.Stderr, "crew: refused: not admitted: "), r.Stderr)
	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	wr := w.wait(t, 30*time.Second)
	require.Equal(t, 0, wr.Code, wr.Stderr)
	for _, line := range strings.Split(strings.TrimSpace(wr.Stderr), "\n") {
		assert.True(t, strings.HasPrefix(line, `crew: "nightly build": `), "line %q names the task", line)
	}
	assert.Contains(t, wr.Stderr, `crew: "nightly build": waiting for a slot: 1st in line`)
	assert.Contains(t, wr.Stderr, `crew: "nightly build": admitted as run `)
	r = e.run("start", "nf", "--", "no-such-command-crew-e2e")
	assert.Equal(t, 127, r.Code)
	assert.Equal(t, "crew: nf: command not found: no-such-command-crew-e2e\n", r.Stderr)
}

// Durations take days wherever crew takes a duration.
func TestDurationsWithDays(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 0, e.run("start", "t", "--", "true").Code)
	for _, args := range [][]string{
		{"prune", "--older-than", "7d"},
		{"prune", "--older-than", "1d12h", "--keep", "1"},
		{"start", "--wait=1d", "--grace", "1d", "--lock-timeout", "1d", "w", "--", "true"},
		{"wait", "--timeout", "2d", "t"},
		{"recover", "--timeout", "1d"},
		{"init", "--retain-for", "30d", "--lock-timeout", "1d"},
	} {
		r := e.run(args...)
		assert.Equal(t, 0, r.Code, "crew %v: %s", args, r.Stderr)
	}
	var s struct {
		Retention struct {
			RetainFor        string `json:"retainFor"`
			RetainForSeconds int64  `json:"retainForSeconds"`
		} `json:"retention"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.run("status", "--json").Stdout), &s))
	assert.Equal(t, "30d", s.Retention.RetainFor)
	assert.Equal(t, int64(30*24*3600), s.Retention.RetainForSeconds)
}

// Every way of getting a size, a duration or a retention wrong: a usage
// error (64) that says what is accepted, and nothing changed.
func TestRetentionAndSizeErrors(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 0, e.run("init", "--retain", "10", "--log-max", "1MiB").Code)
	cfg := filepath.Join(e.root, "crew.json")
	before, err := os.ReadFile(cfg)
	require.NoError(t, err)
	forms := "(durations: 90s, 10m, 1h30m, 7d)"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"init", "--retain", "-1"}, "crew: --retain must be at least 1 (or 0 to keep any number of finished runs), not -1"},
		{[]string{"init", "--retain", "many"}, `crew: --retain "many": not a whole number`},
		{[]string{"init", "--retain-for", "-1d"}, "crew: --retain-for must be positive (or 0 to keep finished runs of any age), not -1d"},
		{[]string{"init", "--retain-for", "a month"}, `crew: --retain-for "a month": not a duration; give a number and a unit, as in --retain-for=90s ` + forms},
		{[]string{"init", "--retain-for", "5w"}, `crew: --retain-for "5w": not a duration; give a number and a unit, as in --retain-for=90s ` + forms},
		{[]string{"init", "--log-max", "10M"}, `crew: --log-max "10M": invalid size "10M": say 10MiB (binary) or 10MB (decimal)`},
		{[]string{"init", "--log-max", "-5MiB"}, `invalid size "-5MiB": must not be negative`},
		{[]string{"init", "--log-max", "1KiB"}, "crew: --log-max 1KiB is too small: the least is 64KiB (or 0 for no cap)"},
		{[]string{"init", "--log-max", "lots"}, `invalid size "lots": use a number of bytes with an optional unit, such as 65536, 512KiB, 10MiB`},
		{[]string{"start", "--log-max", "1000", "t", "--", "true"}, "crew: --log-max 1000 is too small: the least is 64KiB (or 0 for no cap)"},
		{[]string{"start", "--log-max", "2XB", "t", "--", "true"}, `invalid size "2XB": unknown unit "XB"`},
		{[]string{"start", "--tag", "--detach", "t", "--", "true"}, "crew: --tag and --detach do not go together"},
		{[]string{"start", "--grace", "5", "t", "--", "true"}, `crew: --grace "5": not a duration; give a number and a unit, as in --grace=5s ` + forms},
		{[]string{"start", "--wait=soon", "t", "--", "true"}, `crew: --wait "soon": not a duration; give a number and a unit, as in --wait=90s ` + forms},
		{[]string{"prune", "--older-than", "7x"}, `crew: --older-than "7x": not a duration`},
		{[]string{"prune", "--keep", "-2"}, "crew: --older-than and --keep must not be negative"},
		{[]string{"stop", "--grace", "1 day", "t"}, `crew: --grace "1 day": not a duration`},
	} {
		r := e.run(c.args...)
		assert.Equal(t, 64, r.Code, "crew %v: %s", c.args, r.Stderr)
		assert.Contains(t, r.Stderr, c.want, "crew %v", c.args)
	}
	after, err := os.ReadFile(cfg)
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after), "no failed init changed crew.json")
	assert.Empty(t, finishedOnDisk(t, e.root), "no failed start ran anything")

	// A hand-edited crew.json with a bad retention is a config error (125)
	// that names the file and the field, for every command that needs it.
	require.NoError(t, os.WriteFile(cfg, []byte(`{"version": 1, "maximumInProgress": 2, "retain": -3}`), 0o600))
	for _, args := range [][]string{{"start", "t", "--", "true"}, {"prune"}} {
		r := e.run(args...)
		assert.Equal(t, 125, r.Code, "crew %v: %s", args, r.Stderr)
		assert.True(t, strings.HasPrefix(r.Stderr, "crew: "+cfg+": retain is -3; it must be at least 1 (remove the field to keep every finished run)"), r.Stderr)
	}
	require.NoError(t, os.WriteFile(cfg, []byte(`{"version": 1, "maximumInProgress": 2, "logMax": "10M"}`), 0o600))
	r := e.run("start", "t", "--", "true")
	assert.Equal(t, 125, r.Code)
	assert.True(t, strings.HasPrefix(r.Stderr, "crew: "+cfg+`: logMax: invalid size "10M": say 10MiB (binary) or 10MB (decimal)`), r.Stderr)
}

// status shows the retention, the log cap and the size, text and JSON; the
// size is exact here, and says how it was obtained.
func TestStatusShowsRetentionAndSize(t *testing.T) {
	e := newEnv(t)
	r := e.run("status")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stdout, "Retention: keep every finished run")
	require.Equal(t, 0, e.run("init", "--retain", "50", "--retain-for", "14d", "--log-max", "10MiB").Code)
	for i := range 3 {
		require.Equal(t, 0, e.run("start", fmt.Sprintf("t%d", i), "--", "echo", "0123456789").Code)
	}
	var s struct {
		Retention struct {
			Retain    int    `json:"retain"`
			RetainFor string `json:"retainFor"`
		} `json:"retention"`
		LogMax int64 `json:"logMax"`
		Size   struct {
			Bytes   int64 `json:"bytes"`
			Records struct {
				Files int   `json:"files"`
				Bytes int64 `json:"bytes"`
			} `json:"records"`
			Logs struct {
				Files int   `json:"files"`
				Bytes int64 `json:"bytes"`
			} `json:"logs"`
			Exact  bool   `json:"exact"`
			Method string `json:"method"`
		} `json:"size"`
	}
	out := e.run("status", "--json")
	require.NoError(t, json.Unmarshal([]byte(out.Stdout), &s))
	assert.Equal(t, 50, s.Retention.Retain)
	assert.Equal(t, "14d", s.Retention.RetainFor)
	assert.Equal(t, int64(10<<20), s.LogMax)
	assert.Equal(t, 3, s.Size.Records.Files)
	assert.Equal(t, 3, s.Size.Logs.Files)
	assert.Equal(t, int64(33), s.Size.Logs.Bytes, "three logs of 11 bytes")
	var recBytes int64
	for _, id := range finishedOnDisk(t, e.root) {
		fi, err := os.Stat(doneRecordPath(t, e.root, id))
		require.NoError(t, err)
		recBytes += fi.Size()
	}
	assert.Equal(t, recBytes, s.Size.Records.Bytes)
	assert.Equal(t, recBytes+33, s.Size.Bytes)
	assert.True(t, s.Size.Exact)
	assert.Contains(t, s.Size.Method, "exact: ")
	text := e.run("status").Stdout
	assert.Contains(t, text, "Retention: keep the newest 50 finished runs, and every run that finished less than 14d ago")
	assert.Contains(t, text, "Log cap: 10 MiB per run")
	assert.Regexp(t, `Size: [0-9.]+ KiB: records [0-9.]+ KiB \(3\), logs 33 B \(3\)`, text)
}

// An hour with more finished runs than status counts (500) is listed only
// that far, so status stays fast on a crowded hour: its size is then a
// lower bound, and says so, text and JSON.
func TestStatusSizeOfACrowdedHourIsALowerBound(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 0, e.run("start", "t", "--", "true").Code)
	ids := finishedOnDisk(t, e.root)
	require.Len(t, ids, 1)
	shard := shardOf(t, ids[0])
	dir := filepath.Join(e.root, "runs", "done", shard)
	rec, err := os.ReadFile(filepath.Join(dir, ids[0]+".run"))
	require.NoError(t, err)
	// Copies under ids of the same hour (the record's own id differs from
	// its name, which the size does not read).
	for i := range 600 {
		id := fmt.Sprintf("%s%016x", ids[0][:len(ids[0])-16], i)
		require.NoError(t, os.WriteFile(filepath.Join(dir, id+".run"), rec, 0o600))
	}
	var s struct {
		Size struct {
			Records struct {
				Files int `json:"files"`
			} `json:"records"`
			Exact   bool     `json:"exact"`
			Crowded []string `json:"crowded"`
			Method  string   `json:"method"`
		} `json:"size"`
	}
	out := e.run("status", "--json")
	require.Equal(t, 0, out.Code, out.Stderr)
	require.NoError(t, json.Unmarshal([]byte(out.Stdout), &s))
	assert.False(t, s.Size.Exact)
	assert.Equal(t, []string{shard}, s.Size.Crowded)
	assert.Equal(t, 501, s.Size.Records.Files, "the 500 counted and the one that shows there are more")
	assert.Contains(t, s.Size.Method, "hour-shard "+shard+" holds more than the 500 runs listed of it, so the figures are lower bounds")
	text := e.run("status").Stdout
	assert.Regexp(t, `Size: at least about [0-9.]+ [KM]iB: records [0-9.]+ [KM]iB \(501\), logs [0-9.]+ [KM]?i?B \([0-9]+\) \(hour `+shard+` holds more runs than status counts: see status --json\)`, text)
}
