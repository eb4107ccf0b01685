package e2e

// State roots written by earlier crew releases (testdata/roots, made by
// testdata/roots/make-v1.sh with the release that wrote them), opened with
// today's crew: status, history, logs, recover and a start work on them,
// and their outputs match the golden files in testdata/golden (refresh
// them with `go test ./e2e -run TestUpgrade -update` after a deliberate
// change of crew's output, and read the diff).

import (
	"bytes"
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// copyFixture copies the state root testdata/roots/<name> into e.root, as
// crew left it: directories 0700 and files 0600 (git keeps no modes), and
// a FIFO for each queue ticket's bell (git keeps no FIFOs).
func (e *env) copyFixture(name string) {
	e.t.Helper()
	src := filepath.Join("..", "testdata", "roots", name)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(e.root, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o700)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			return err
		}
		if ticket, ok := strings.CutSuffix(dst, ".json"); ok && filepath.Base(filepath.Dir(dst)) == "queue" {
			return syscall.Mkfifo(ticket+".bell", 0o600)
		}
		return nil
	})
	require.NoError(e.t, err)
}

// golden compares got with testdata/golden/<name>, or rewrites the file
// with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("..", "testdata", "golden", name)
	if *updateGolden {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden file (make it with -update, then read it)")
	assert.Equal(t, string(want), got, "output differs from %s (refresh it with -update if the change is meant)", path)
}

// cells splits a row of crew's text tables into its cells (columns are
// two spaces or more apart; no cell holds two spaces in a row).
var cells = regexp.MustCompile(`\s{2,}`)

// timeColumns depend on when the test runs: how long ago an active run was
// created, and when a finished one started (a time of day today, a date
// after that).
var timeColumns = map[string]bool{"FOR": true, "STARTED": true}

// normalized makes an output comparable across runs and days: the state
// root's path (a temporary directory) becomes $ROOT, and each row of a
// table (from its "ID" header to the next blank line) becomes its cells
// joined by " | ", with the time columns' cells replaced by <time> (their
// widths, and so every row's spacing, change with them).
func (e *env) normalized(out string) string {
	out = strings.ReplaceAll(out, e.root, "$ROOT")
	lines := strings.Split(out, "\n")
	var masked map[int]bool // column indexes to mask, inside a table
	for i, line := range lines {
		row := cells.Split(strings.TrimSpace(line), -1)
		switch {
		case strings.HasPrefix(line, "  ID  "):
			masked = map[int]bool{}
			for j, name := range row {
				masked[j] = timeColumns[name]
			}
		case line == "":
			masked = nil
			continue
		case masked == nil:
			continue
		default:
			for j := range row {
				if masked[j] {
					row[j] = "<time>"
				}
			}
		}
		lines[i] = strings.Join(row, " | ")
	}
	return strings.Join(lines, "\n")
}

// v1 is what testdata/roots/v1 holds (make-v1.sh).
var v1 = struct {
	active, finished []string
	ticket           string
}{
	active: []string{"provisioning", "running", "running-too"},
	finished: []string{"lost", "holder", "stopme", "ünïcode task/with spaces", "retried", "deploy:prod",
		"chatty", "slow", "fails", "ok"},
	ticket: "queued",
}

// A version 1 root, as a crash (or a live upgrade) leaves it: status and
// history read it as they always did, its runs' logs (a capped one among
// them) read back, recover finalizes its dead runs and its dead waiter's
// ticket, and a start is admitted; the admission lock file is made at the
// first admission. Until then crew.json keeps version 1 (reading the root
// changes nothing); the first reservation converts the root to version 2
// (crew.json, with every setting kept), and the run it makes has a slot
// file (<id>.run) beside the version 1 records (<id>.json), which stay.
func TestUpgradeV1Root(t *testing.T) {
	e := newEnv(t)
	e.copyFixture("v1")

	for name, args := range map[string][]string{
		"status.json": {"status", "--json"}, "status.txt": {"status"},
		"history.json": {"history", "--json"}, "history.txt": {"history"},
	} {
		r := e.runEnv([]string{"TZ=UTC"}, args...)
		require.Equal(t, 0, r.Code, r.Stderr)
		golden(t, "v1/"+name, e.normalized(r.Stdout))
	}

	s := e.status()
	assert.ElementsMatch(t, v1.active, tasksOf(s.Active))
	for _, r := range s.Active {
		assert.False(t, r.HoldsSlot, "%s: its owner is gone", r.Task)
	}
	assert.Equal(t, v1.finished, tasksOf(e.history().Runs))

	chatty := e.finishedRun("chatty")
	logs := e.run("logs", chatty.RunID)
	require.Equal(t, 0, logs.Code, logs.Stderr)
	assert.True(t, strings.HasPrefix(logs.Stdout, "line 0 of chatty output\n"), "the capped log's head")
	assert.True(t, strings.HasSuffix(logs.Stdout, "line 2999 of chatty output\n"), "the capped log's tail")
	assert.Less(t, len(logs.Stdout), 80<<10, "the capped log is capped")

	rep, r := e.recover()
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, len(v1.active)+1, rep.changes(), "three dead runs and a dead waiter's ticket: %+v", rep.Items)
	s = e.status()
	assert.Empty(t, s.Active)
	for _, task := range v1.active {
		assert.Equal(t, "interrupted", e.finishedRun(task).State, task)
	}
	again, _ := e.recover()
	assert.Zero(t, again.changes(), "a second recover has nothing to do: %+v", again.Items)

	before, err := os.ReadFile(filepath.Join(e.root, "crew.json"))
	require.NoError(t, err)
	assert.Contains(t, string(before), `"version": 1`, "status, history and recover leave the root's version alone")
	r = e.run("start", "after-upgrade", "--", "true")
	require.Equal(t, 0, r.Code, r.Stderr)
	assertAdmissionLockFile(t, e.root)
	cfg, err := os.ReadFile(filepath.Join(e.root, "crew.json"))
	require.NoError(t, err)
	assert.Contains(t, string(cfg), `"version": 2`, "converted at the first reservation")
	var was, now map[string]any
	require.NoError(t, json.Unmarshal(before, &was))
	require.NoError(t, json.Unmarshal(cfg, &now))
	delete(was, "version")
	delete(now, "version")
	assert.Equal(t, was, now, "every setting kept")
	after := e.finishedRun("after-upgrade")
	assert.FileExists(t, filepath.Join(e.root, "runs", "done", shardOf(t, after.RunID), after.RunID+".run"))
	chattyAgain := e.finishedRun("chatty")
	assert.FileExists(t, filepath.Join(e.root, "runs", "done", shardOf(t, chattyAgain.RunID), chattyAgain.RunID+".json"), "version 1 records stay")
	assert.Equal(t, "after-upgrade", tasksOf(e.history().Runs)[0], "history reads both formats")
}

// A damaged version 1 root (testdata/roots/v1-damaged: torn, foreign and
// unknown-version records, a link planted among the records, junk in the
// index of finished runs): status and history still answer and name what
// they cannot read, recover moves the unreadable aside, and starts work.
func TestUpgradeDamagedV1Root(t *testing.T) {
	e := newEnv(t)
	e.copyFixture("v1-damaged")

	st := e.run("status", "--json")
	require.Equal(t, 0, st.Code, st.Stderr)
	var s statusJSON
	require.NoError(t, json.Unmarshal([]byte(st.Stdout), &s))
	var problems []string
	for _, p := range s.Problems {
		problems = append(problems, filepath.Base(p.Path)+": "+p.Error)
	}
	joined := strings.Join(problems, "\n")
	assert.Contains(t, joined, "unknown record version 9 (this crew reads version 1)")
	assert.Contains(t, joined, "r-20261202T100111.000000001Z-000000000000000a.json")
	assert.Contains(t, joined, "a symbolic link")
	h := e.run("history", "--json")
	require.Equal(t, 0, h.Code, h.Stderr)
	assert.Equal(t, []string{"ok"}, tasksOf(e.history().Runs), "the one readable finished run")

	rep, r := e.recover()
	require.Equal(t, 0, r.Code, "%s%s", r.Stdout, r.Stderr)
	var quarantined int
	for _, it := range rep.Items {
		if it.Outcome == "quarantined" {
			quarantined++
		}
	}
	assert.GreaterOrEqual(t, quarantined, 3, "%+v", rep.Items)
	// What is left is the torn finished record: kept (a finished run holds
	// no slot), indexed as unreadable, and listed as a problem.
	left := e.status().Problems
	require.Len(t, left, 1, "%+v", left)
	assert.Equal(t, "r-20261202T100110.999982382Z-98c02ea74fb127fd.json", filepath.Base(left[0].Path))
	hp := e.history().Problems
	require.Len(t, hp, 1, "history lists the unreadable finished record: %+v", hp)
	passwd, err := os.ReadFile("/etc/passwd")
	require.NoError(t, err)
	assert.False(t, bytes.Contains(passwd, []byte("crew")), "nothing was written through the planted link")

	r = e.run("start", "fine", "--", "true")
	assert.Equal(t, 0, r.Code, r.Stderr)
}

// A run of an older crew that is still running when today's crew first
// uses the root holds its slot: here the test is that run's supervisor
// and command (it holds the run's owner and supervisor locks, as they do).
// Once they are gone, the next start finalizes it and gets in.
func TestUpgradeRunningRunHoldsItsSlot(t *testing.T) {
	e := newEnv(t)
	e.copyFixture("v1")
	require.Equal(t, 0, e.run("init", "--max", "1").Code)
	run := e.activeRun("running")
	release := e.holdRunLocks(run.RunID)

	s := e.status()
	require.Equal(t, 1, s.SlotsInUse, "%+v", s.Active)
	r := e.run("start", "newcomer", "--", "true")
	assert.Equal(t, 75, r.Code, "the old run holds the one slot: %s", r.Stderr)

	release()
	r = e.run("start", "newcomer", "--", "true")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "interrupted", e.finishedRun("running").State)
}

// holdRunLocks takes a run's owner and supervisor locks in this process
// (as the run's supervisor and command would), and points its record at
// them: the fixture's record names the lock files of the machine it was
// made on. It returns the release.
func (e *env) holdRunLocks(id string) (release func()) {
	e.t.Helper()
	recPath := activeRecordPath(e.root, id)
	var rec map[string]any
	require.NoError(e.t, json.Unmarshal(readRecordJSON(e.t, recPath), &rec))
	locks := map[string]any{}
	var files []*os.File
	for key, name := range map[string]string{"owner": id + ".lock", "supervisor": id + ".supervisor.lock"} {
		f, err := os.Open(filepath.Join(e.root, "owners", name))
		require.NoError(e.t, err)
		files = append(files, f)
		require.NoError(e.t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
		fi, err := f.Stat()
		require.NoError(e.t, err)
		st := fi.Sys().(*syscall.Stat_t)
		locks[key] = map[string]any{"dev": st.Dev, "ino": st.Ino}
	}
	rec["locks"] = locks
	b, err := json.MarshalIndent(rec, "", "  ")
	require.NoError(e.t, err)
	writeRecordJSON(e.t, recPath, append(b, '\n'))
	release = func() {
		for _, f := range files {
			f.Close()
		}
	}
	e.t.Cleanup(release)
	return release
}

// assertAdmissionLockFile checks the admission lock file: a regular file
// with one link, in .locks/.
func assertAdmissionLockFile(t *testing.T, root string) os.FileInfo {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(root, ".locks", "dispatch-admission.lock"))
	require.NoError(t, err, "the admission lock file")
	assert.True(t, fi.Mode().IsRegular(), "the admission lock is a regular file: %v", fi.Mode())
	assert.EqualValues(t, 1, fi.Sys().(*syscall.Stat_t).Nlink, "the admission lock file has one link")
	return fi
}

// waitReached waits for a failpoint gate to be reached.
func waitReached(t *testing.T, gate string) {
	t.Helper()
	eventually(t, 10*time.Second, "the failpoint "+gate, func() bool { return exists(gate + ".reached") })
}

// The first reservation on a version 1 root writes crew.json at version 2
// before it writes a record file; if that write fails (a full disk), the
// start fails with 125 and says what it could not write, and nothing is
// reserved: no record, no lock file, crew.json still at version 1. The
// next start converts the root and runs.
func TestUpgradeThatCannotWriteTheConfig(t *testing.T) {
	e := newEnv(t)
	e.copyFixture("v1")
	rep, r := e.recover() // the fixture's dead runs go first: their slots are not the point
	require.Equal(t, 0, r.Code, r.Stderr)
	require.NotZero(t, rep.changes())
	owners := func() []string {
		ents, err := os.ReadDir(filepath.Join(e.root, "owners"))
		require.NoError(t, err)
		var names []string
		for _, ent := range ents {
			if strings.HasSuffix(ent.Name(), ".lock") {
				names = append(names, ent.Name())
			}
		}
		return names
	}
	locksBefore := owners()

	r = e.runEnv([]string{"CREW_FAILPOINT=upgrade-write:error:ENOSPC"}, "start", "full", "--", "true")
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "upgrade the state root: write "+filepath.Join(e.root, "crew.json")+": no space left on device")
	cfg, err := os.ReadFile(filepath.Join(e.root, "crew.json"))
	require.NoError(t, err)
	assert.Contains(t, string(cfg), `"version": 1`, "crew.json is unchanged")
	assert.Empty(t, e.status().Active, "nothing was reserved")
	assert.ElementsMatch(t, locksBefore, owners(), "no lock file of the failed start is left")

	r = e.run("start", "next", "--", "true")
	require.Equal(t, 0, r.Code, r.Stderr)
	cfg, err = os.ReadFile(filepath.Join(e.root, "crew.json"))
	require.NoError(t, err)
	assert.Contains(t, string(cfg), `"version": 2`)
}
