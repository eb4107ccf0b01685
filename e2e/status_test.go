package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStatusShowsActiveAndFinished(t *testing.T) {
	e := newEnv(t)
	e.initMax(2)
	for i := range 12 {
		r := e.run("start", fmt.Sprintf("done-%02d", i), "--", "true")
		require.Equal(t, 0, r.Code, r.Stderr)
	}
	gate, openGate := e.gate("release")
	p := e.start(nil, append([]string{"start", "deploy:prod", "--"}, waitCmd(gate)...)...)
	run := e.activeRun("deploy:prod")

	s := e.status()
	assert.Equal(t, 1, s.Version)
	assert.Equal(t, e.root, s.Root)
	assert.Equal(t, 2, s.MaximumInProgress)
	assert.Equal(t, 1, s.SlotsInUse)
	require.Len(t, s.Active, 1)
	a := s.Active[0]
	assert.Equal(t, "deploy:prod", a.Task)
	assert.Equal(t, "running", a.State)
	assert.Equal(t, p.cmd.Process.Pid, a.SupervisorPID)
	assert.Positive(t, a.TaskPID)
	assert.True(t, a.OwnerAlive)
	assert.True(t, a.HoldsSlot)
	assert.NotNil(t, a.StartedAt)
	assert.Nil(t, a.FinishedAt)
	assert.Nil(t, a.ExitCode)

	require.Len(t, s.Finished, 10, "the last 10 finished runs")
	assert.Equal(t, "done-11", s.Finished[0].Task, "newest first")
	assert.Equal(t, "done-02", s.Finished[9].Task)

	// The raw JSON has every documented field, in camelCase.
	r := e.run("status", "--json")
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &raw))
	for _, k := range []string{"version", "maximumInProgress", "slotsInUse", "active", "finished"} {
		assert.Contains(t, raw, k)
	}
	act := raw["active"].([]any)[0].(map[string]any)
	for _, k := range []string{"runId", "task", "state", "createdAt", "startedAt", "finishedAt", "exitCode", "reason", "supervisorPid", "taskPid", "ownerAlive"} {
		assert.Contains(t, act, k)
	}

	// Human output names the same facts.
	r = e.run("status")
	require.Equal(t, 0, r.Code)
	assert.Contains(t, r.Stdout, "Slots: 1/2 in use")
	assert.Regexp(t, `\n  `+shortID(run.RunID)+`  deploy:prod  running  +\S+ +`+fmt.Sprint(a.TaskPID)+`  sh -c `, r.Stdout)
	assert.Contains(t, r.Stdout, "  "+shortID(s.Finished[0].RunID)+"  done-11  succeeded  ")

	// One task, one run.
	ts := e.status("deploy:prod")
	require.Len(t, ts.Active, 1)
	assert.Empty(t, ts.Finished)
	one := e.runRecord(run.RunID)
	assert.Equal(t, run.RunID, one.RunID)
	assert.Equal(t, "running", one.State)

	openGate()
	require.Equal(t, 0, p.wait(t, 10*time.Second).Code)
	done := e.runRecord(run.RunID)
	assert.Equal(t, "succeeded", done.State)
	require.NotNil(t, done.ExitCode)
	assert.NotNil(t, done.FinishedAt)
	assert.False(t, done.OwnerAlive)
}

// TestStatusChangesNothing: status never creates the state root, never
// takes the admission lock and never writes a file.
func TestStatusChangesNothing(t *testing.T) {
	e := newEnv(t)
	r := e.run("status")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stdout, "Slots: 0/4 in use")
	assert.Contains(t, r.Stdout, "no config, default cap")
	_, err := os.Stat(e.root)
	assert.True(t, os.IsNotExist(err), "status created the state root")

	require.Equal(t, 0, e.run("start", "x", "--", "true").Code)
	before := snapshotTree(t, e.root)
	gate, openGate := e.gate("holder")
	holder := e.start([]string{"CREW_FAILPOINT=admission-locked:wait:" + gate}, "start", "y", "--", "true")
	eventually(t, 10*time.Second, "the admission lock to be held", func() bool { return exists(gate + ".reached") })
	r = e.run("status", "--json")
	require.Equal(t, 0, r.Code, "status works while admission is locked: %s", r.Stderr)
	openGate()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	mid := snapshotTree(t, e.root)
	for range 3 {
		require.Equal(t, 0, e.run("status").Code)
	}
	assert.Equal(t, mid, snapshotTree(t, e.root), "status modified the state root")
	assert.NotEqual(t, before, mid)
}

func snapshotTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		out[path] = fmt.Sprintf("%v %d %d", info.Mode(), info.Size(), info.ModTime().UnixNano())
		return nil
	}))
	return out
}

func TestInitChangesTheCap(t *testing.T) {
	e := newEnv(t)
	r := e.run("init")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "maximumInProgress 4")
	info, err := os.Stat(e.root)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), info.Mode().Perm())
	cfgInfo, err := os.Stat(filepath.Join(e.root, "crew.json"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), cfgInfo.Mode().Perm())

	e.initMax(1)
	gate, openGate := e.gate("release")
	p := e.start(nil, append([]string{"start", "one", "--"}, waitCmd(gate)...)...)
	e.activeRun("one")
	assert.Equal(t, 75, e.run("start", "two", "--", "true").Code)

	// Raising the cap while a run is active takes effect at once.
	r = e.run("init", "--max", "2")
	require.Equal(t, 0, r.Code)
	assert.Contains(t, r.Stderr, "maximumInProgress 2 (was 1)")
	assert.Equal(t, 0, e.run("start", "two", "--", "true").Code)
	// Idempotent: init without --max keeps the cap.
	require.Equal(t, 0, e.run("init").Code)
	assert.Equal(t, 2, e.status().MaximumInProgress)
	openGate()
	p.wait(t, 10*time.Second)
}

func TestRootSelection(t *testing.T) {
	e := newEnv(t)
	other := filepath.Join(e.dir, "other-root")
	r := e.run("--root", other, "start", "x", "--", "true")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.DirExists(t, filepath.Join(other, "runs"), "--root wins over CREW_ROOT")
	_, err := os.Stat(e.root)
	assert.True(t, os.IsNotExist(err))

	xdg := filepath.Join(e.dir, "xdg")
	cmd := e.command(nil, "start", "y", "--", "true")
	cmd.Env = append(withoutCrewRoot(cmd.Env), "XDG_STATE_HOME="+xdg)
	require.NoError(t, cmd.Run())
	assert.DirExists(t, filepath.Join(xdg, "crew", "runs"))

	home := filepath.Join(e.dir, "home")
	cmd = e.command(nil, "start", "z", "--", "true")
	cmd.Env = append(withoutVar(withoutCrewRoot(cmd.Env), "XDG_STATE_HOME"), "HOME="+home)
	require.NoError(t, cmd.Run())
	assert.DirExists(t, filepath.Join(home, ".local", "state", "crew", "runs"))
}

func withoutCrewRoot(env []string) []string { return withoutVar(env, "CREW_ROOT") }

func withoutVar(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if len(kv) > len(name) && kv[:len(name)+1] == name+"=" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// shortID is a run id as crew shows it where space is short: the first 8
// hex digits of its random part.
func shortID(id string) string { return id[len(id)-16 : len(id)-8] }
