//go:build etcd

package e2e

// One table of behaviours, run against both backends (a local state root
// and an etcd store), so that they cannot drift apart. Only what both must
// do alike belongs here: a local run whose supervisor is SIGKILLed keeps
// its slot while its command lives, an etcd run's command is killed by its
// guard, so the case below ends the command itself before recovering.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var sharedCases = []struct {
	name string
	run  func(t *testing.T, f *fleet)
}{
	// SIGTERM reaches crew start while its run is being reserved (held at
	// the reserved failpoint). Admission's signal watcher takes it, so the
	// run must be recorded as stopped, its command never started, and crew
	// exit 143: not launched with the signal lost.
	{"SignalledAsReserved", func(t *testing.T, f *fleet) {
		f.initMax(1)
		gate := filepath.Join(t.TempDir(), "reserved")
		// The stop-signal failpoint's gate is open from the start: it only
		// marks the moment crew's watcher has taken the signal.
		taken := filepath.Join(t.TempDir(), "taken")
		require.NoError(t, os.WriteFile(taken, nil, 0o600))
		cmd, ob := f.obs.sleeper("early", 50*time.Millisecond)
		p := f.start("h1", []string{"CREW_FAILPOINT=reserved:wait:" + gate + ",stop-signal:wait:" + taken}, startArgs("early", cmd)...)
		eventually(t, 20*time.Second, "the start to hold its reservation", func() bool {
			_, err := os.Stat(gate + ".reached")
			return err == nil
		})
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM)) // our own child
		// The failpoint holds admission; the reservation goes on only once
		// crew's watcher has taken the signal.
		eventually(t, 20*time.Second, "crew to take the signal", func() bool {
			_, err := os.Stat(taken + ".reached")
			return err == nil
		})
		require.NoError(t, os.WriteFile(gate, nil, 0o600))
		r := p.wait(t, 20*time.Second)
		wantCode(t, r, "a start signalled as its run was reserved", 143)
		assert.False(t, ob.hasStarted(), "the command ran although crew was told to stop before it started")

		id := f.runIDOf("early")
		require.NotEmpty(t, id, "the signalled run's final record")
		rec := f.finalRecord(id, 5*time.Second)
		assert.Equal(t, "stopped", rec.State)
		assert.Equal(t, "SIGTERM", rec.Signal)
		assert.Contains(t, rec.Reason, "crew received SIGTERM before the command started; it was never run")
		f.runNext("h2", "the next start, the slot free at once")
	}},
	{"ExitCodePassthrough", func(t *testing.T, f *fleet) {
		f.initMax(1)
		r := f.run("h1", startArgs("seven", []string{"sh", "-c", "exit 7"})...)
		wantCode(t, r, "crew start -- sh -c 'exit 7'", 7)
		r = f.run("h1", startArgs("zero", []string{"true"})...)
		wantCode(t, r, "crew start -- true", 0)
	}},
	{"RefusedAtCap", func(t *testing.T, f *fleet) {
		f.initMax(1)
		p, ob := f.victim("h1", "holder", nil)
		r := f.run("h2", startArgs("other", []string{"true"})...)
		wantCode(t, r, "a start at cap 1 with the slot held", 75)
		_ = p
		_ = ob
	}},
	{"TaskAlreadyActive", func(t *testing.T, f *fleet) {
		f.initMax(2)
		f.victim("h1", "same", nil)
		r := f.run("h2", startArgs("same", []string{"true"})...)
		wantCode(t, r, "a second start of an active task", 76)
	}},
	{"StatusShowsActiveRun", func(t *testing.T, f *fleet) {
		f.initMax(2)
		p, ob := f.victim("h1", "shown", nil)
		s := f.status()
		assert.Equal(t, 2, s.MaximumInProgress)
		assert.Equal(t, 1, s.SlotsInUse)
		require.Len(t, s.Active, 1, "%+v", s.Active)
		a := s.Active[0]
		assert.Equal(t, ob.runID, a.RunID)
		assert.Equal(t, "shown", a.Task)
		assert.Equal(t, "running", a.State)
		assert.Equal(t, "h1", a.Host)
		assert.Equal(t, p.cmd.Process.Pid, a.SupervisorPID)
		assert.True(t, a.OwnerAlive, "ownerAlive")
		assert.True(t, a.HoldsSlot, "holdsSlot")
		st, err := readStat(ob.pid)
		require.NoError(t, err)
		assert.Equal(t, st.pgrp, a.PGID, "pgid is the command's process group")
		assert.Empty(t, s.Queue)
	}},
	{"KilledSupervisorRecovered", func(t *testing.T, f *fleet) {
		f.initMax(1)
		gate, open := f.gate("victim")
		cmd, ob := f.obs.gated("victim", gate)
		p := f.start("h1", []string{"CREW_LEASE_TTL=2s"}, startArgs("victim", cmd)...)
		ob.waitStarted(t, 20*time.Second)
		require.NoError(t, p.cmd.Process.Kill()) // our own child
		p.wait(t, 10*time.Second)
		open()
		ob.waitDone(t, 10*time.Second)
		var rec fleetRun
		eventually(t, 20*time.Second, "crew recover to finalize the run", func() bool {
			f.recover("h2")
			var ok bool
			rec, ok = f.record(ob.runID)
			return ok && rec.State == "interrupted"
		})
		assert.NotEmpty(t, rec.Reason)
		assert.NotNil(t, rec.FinishedAt)
		again := f.recover("h2")
		assert.Zero(t, again.changes(), "recover converges: %+v", again.Items)
		r := f.run("h3", startArgs("next", []string{"true"})...)
		wantCode(t, r, "a start once the run is finalized", 0)
	}},
	{"StopAndWait", func(t *testing.T, f *fleet) {
		f.initMax(2)
		p, ob := f.victim("h1", "stoppable", nil)
		w := f.start("h3", nil, "wait", ob.runID)
		r := f.run("h2", "stop", "--grace", "2s", ob.runID)
		wantCode(t, r, "crew stop from another invocation", 0)
		wantCode(t, p.wait(t, 20*time.Second), "the stopped crew start", 143)
		wantCode(t, w.wait(t, 20*time.Second), "crew wait of the stopped run", 143)
		rec := f.finalRecord(ob.runID, 10*time.Second)
		assert.Equal(t, "stopped", rec.State)
		assert.Contains(t, rec.Reason, "stopped by crew stop")
		r = f.run("h2", "stop", ob.runID)
		wantCode(t, r, "crew stop of a finished run", 0)
		assert.Contains(t, r.Stderr, "had already finished")
	}},
	{"TimeoutAndRetries", func(t *testing.T, f *fleet) {
		f.initMax(1)
		r := f.run("h1", startArgs("slow", []string{"sleep", "30"}, "--timeout", "300ms", "--grace", "1s", "--retries", "1", "--retry-delay", "0s")...)
		wantCode(t, r, "crew start --timeout --retries", 124)
		rec := f.finalRecord(f.status().Finished[0].RunID, 10*time.Second)
		assert.Equal(t, "failed", rec.State)
		assert.Len(t, rec.Attempts, 2, "both attempts timed out and are recorded")
		assert.Contains(t, rec.Reason, "timed out after 300ms")
	}},
	{"DetachWaitLogs", func(t *testing.T, f *fleet) {
		f.initMax(1)
		r := f.run("h1", startArgs("bg", []string{"sh", "-c", "echo from-bg; exit 3"}, "--detach")...)
		wantCode(t, r, "crew start --detach", 0)
		id := strings.TrimSpace(r.Stdout)
		assert.True(t, strings.HasPrefix(id, "r-"), "crew start --detach prints the run id: %q", r.Stdout)
		wantCode(t, f.run("h2", "wait", id), "crew wait of the detached run", 3)
		r = f.run("h1", "logs", id)
		wantCode(t, r, "crew logs on the host that ran it", 0)
		assert.Equal(t, "from-bg\n", r.Stdout)
	}},
	// crew start --detach --wait returns once in line, and a background
	// waiter waits in its place: crew wait, crew stop and --wait=D work on
	// its id, and one killed with SIGKILL frees its place (its lock, or
	// its lease, goes with it).
	{"DetachWaitInBackground", func(t *testing.T, f *fleet) {
		f.initMax(1)
		gate, open := f.gate("holder")
		wantCode(t, f.run("h1", startArgs("holder", waitCmd(gate), "--detach")...), "the holder's crew start --detach", 0)
		inLine := func(task string, cmd []string, flags ...string) string {
			t.Helper()
			args := startArgs(task, cmd, append([]string{"--detach", "--wait"}, flags...)...)
			// A short lease, so that the killed waiter's place goes soon;
			// not the shortest, so that the living waiters' renewals
			// survive a loaded test machine (2 s once did not).
			r, _, err := f.tryRunFor(60*time.Second, "h2", []string{"CREW_LEASE_TTL=5s"}, args...)
			require.NoError(t, err, "crew start --detach --wait returns while the slot is held")
			wantCode(t, r, "crew start --detach --wait", 0)
			id := strings.TrimSpace(r.Stdout)
			require.True(t, strings.HasPrefix(id, "r-"), "it prints the run id: %q", r.Stdout)
			t.Cleanup(func() { _, _, _ = f.tryRunFor(30*time.Second, "h2", nil, "stop", id) })
			return id
		}
		ran := inLine("ran", []string{"sh", "-c", "echo from-line; exit 3"})
		stopped := inLine("stopped", []string{"true"})
		gaveUp := inLine("gave-up", []string{"true"}, "--wait=300ms")
		killed := inLine("killed", []string{"true"})

		wantCode(t, f.run("h1", "stop", stopped), "crew stop of a background waiter", 0)
		r := f.run("h1", "wait", stopped)
		wantCode(t, r, "crew wait of a start stopped in line", 143)
		assert.Contains(t, r.Stderr, "run "+stopped+" never ran: it left the queue stopped: stopped by crew stop")
		r = f.run("h1", "wait", gaveUp)
		wantCode(t, r, "crew wait of a start whose --wait=D ran out", 75)
		assert.Contains(t, r.Stderr, "run "+gaveUp+" never ran: it left the queue failed: not admitted: gave up after waiting 300ms in the queue")

		w := proveBackgroundWaiter(t, killed, identity{env: []string{f.storeEnv()}})
		require.NoError(t, w.signal(syscall.SIGKILL))
		eventually(t, 30*time.Second, "the killed waiter's place to go", func() bool {
			q := f.status().Queue
			return len(q) == 1 && q[0].RunID == ran
		})
		r = f.run("h1", "wait", killed)
		if f.kind == "local" {
			wantCode(t, r, "crew wait of a waiter killed in line (its ticket stays)", 125)
			assert.Contains(t, r.Stderr, "never ran: its waiting start died in line (killed?)")
		} else {
			// Nothing of it is left to tell more.
			wantCode(t, r, "crew wait of a waiter killed in line (its ticket went with its lease)", 64)
			assert.Contains(t, r.Stderr, "no run "+killed+" in etcd store")
		}

		open()
		wantCode(t, f.run("h1", "wait", ran), "crew wait of the run that waited in line", 3)
		r = f.run("h2", "logs", ran)
		wantCode(t, r, "crew logs on the host that ran it", 0)
		assert.Equal(t, "from-line\n", r.Stdout)
	}},
	// crew wait RUN|TASK reads the line before the runs, on both stores: a
	// start admitted while it looks (held between its two reads, failpoint
	// "resolving") is found in one or the other. Read the other way round
	// it was in neither: crew wait said there was no such run (exit 64),
	// as it did here on etcd once (DetachWaitInBackground, right after the
	// holder ended).
	{"WaitFindsAStartAdmittedWhileItLooks", func(t *testing.T, f *fleet) {
		f.initMax(1)
		gate, open := f.gate("holder")
		wantCode(t, f.run("h1", startArgs("holder", waitCmd(gate), "--detach")...), "the holder's crew start --detach", 0)
		ends, end := f.gate("next-ends")
		r := f.run("h2", startArgs("next", []string{"sh", "-c", `while [ ! -e "$1" ]; do sleep 0.01; done; exit 3`, "next", ends}, "--detach", "--wait")...)
		wantCode(t, r, "crew start --detach --wait", 0)
		id := strings.TrimSpace(r.Stdout)
		byID, openByID := f.gate("resolving-id")
		byTask, openByTask := f.gate("resolving-task")
		lookers := map[string]*proc{
			"crew wait " + id: f.start("h1", []string{"CREW_FAILPOINT=resolving:wait:" + byID}, "wait", id),
			"crew wait next":  f.start("h1", []string{"CREW_FAILPOINT=resolving:wait:" + byTask}, "wait", "next"),
		}
		eventually(t, 30*time.Second, "both crew waits to have read the line", func() bool {
			return exists(byID+".reached") && exists(byTask+".reached")
		})
		// Admitted and running (a finished run is found among the finished
		// ones whatever the order) while both look.
		open()
		eventually(t, 30*time.Second, "next to be admitted", func() bool {
			a := f.status().Active
			return len(a) == 1 && a[0].Task == "next"
		})
		openByID()
		openByTask()
		end()
		for what, p := range lookers {
			wantCode(t, p.wait(t, 60*time.Second), what+", the start admitted while it looked", 3)
		}
	}},
	// --tag prefixes crew's copy of each line, not the log's; --retries
	// runs a failed command again in the same slot.
	{"TagAndRetries", func(t *testing.T, f *fleet) {
		f.initMax(1)
		r := f.run("h1", startArgs("tagged", []string{"echo", "tagged-out"}, "--tag")...)
		wantCode(t, r, "crew start --tag", 0)
		assert.Equal(t, "tagged\ttagged-out\n", r.Stdout)
		assert.Equal(t, "tagged-out\n", f.run("h1", "logs", "tagged").Stdout)
		r = f.run("h1", startArgs("retried", []string{"sh", "-c", "echo try; exit 4"}, "--retries", "1", "--retry-delay", "0s")...)
		wantCode(t, r, "crew start --retries 1", 4)
		assert.Equal(t, "try\ntry\n", r.Stdout)
		assert.Len(t, f.finalRecord(f.runIDOf("retried"), 10*time.Second).Attempts, 2, "both attempts are in the record")
	}},
	// The command is told its run, task and store.
	{"CommandEnvironment", func(t *testing.T, f *fleet) {
		f.initMax(1)
		envFile := filepath.Join(f.dir, "env")
		r := f.run("h1", startArgs("told", []string{"sh", "-c", `env > "$0"`, envFile})...)
		wantCode(t, r, "crew start of env", 0)
		environ, err := os.ReadFile(envFile)
		require.NoError(t, err)
		lines := strings.Split(string(environ), "\n")
		assert.Contains(t, lines, "CREW_RUN_ID="+f.runIDOf("told"))
		assert.Contains(t, lines, "CREW_TASK=told")
		assert.Contains(t, lines, f.storeEnv())
	}},
	// Labels (issue 24 item 7) on both stores: history, status and wait
	// --label select by the labels in the records (and a waiting start's
	// ticket); crew wait --label waits for the finished, active and waiting
	// runs with the label and names those that failed.
	{"Labels", func(t *testing.T, f *fleet) {
		f.initMax(2)
		for _, c := range []struct{ task, label, code string }{
			{"done-ok", "pipeline=7", "0"}, {"done-fail", "pipeline=7", "2"}, {"elsewhere", "pipeline=8", "5"},
		} {
			r := f.run("h1", startArgs(c.task, []string{"sh", "-c", "exit " + c.code}, "--label", c.label, "--label", "stage="+c.task)...)
			wantCode(t, r, "crew start --label "+c.label, 0, 2, 5)
		}
		active, _ := f.victim("h1", "active", nil, "--label", "pipeline=7")
		other, _ := f.victim("h2", "unlabelled", nil)
		queued := f.start("h2", nil, startArgs("queued", []string{"sh", "-c", "exit 3"}, "--wait", "--label", "pipeline=7")...)
		eventually(t, 20*time.Second, "the labelled start to wait in line", func() bool { return len(f.status().Queue) == 1 })

		var h struct {
			Runs []struct {
				Task       string            `json:"task"`
				Labels     map[string]string `json:"labels"`
				DurationMs *int64            `json:"durationMs"`
			} `json:"runs"`
			Limit int  `json:"limit"`
			More  bool `json:"more"`
		}
		r := f.run("h3", "history", "--label", "pipeline=7", "--json")
		wantCode(t, r, "crew history --label", 0)
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &h), r.Stdout)
		require.Len(t, h.Runs, 2, r.Stdout)
		assert.Equal(t, "done-fail", h.Runs[0].Task)
		assert.Equal(t, map[string]string{"pipeline": "7", "stage": "done-fail"}, h.Runs[0].Labels)
		assert.Equal(t, "done-ok", h.Runs[1].Task)
		assert.NotNil(t, h.Runs[1].DurationMs, "a finished run's durationMs")
		assert.False(t, h.More)
		r = f.run("h3", "history", "--label", "pipeline=7", "--label", "stage=done-ok", "--limit", "1", "--json")
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &h), r.Stdout)
		require.Len(t, h.Runs, 1, r.Stdout)
		assert.Equal(t, "done-ok", h.Runs[0].Task, "both labels")
		assert.False(t, h.More, "one run has both labels")
		r = f.run("h3", "history", "--label", "pipeline=7", "--limit", "1", "--json")
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &h), r.Stdout)
		assert.True(t, h.More, "a second run has the label: %s", r.Stdout)

		var s struct {
			Active   []struct{ Task string } `json:"active"`
			Finished []struct{ Task string } `json:"finished"`
			Queue    []struct {
				Task   string            `json:"task"`
				Labels map[string]string `json:"labels"`
			} `json:"queue"`
		}
		r = f.run("h3", "status", "--label", "pipeline=7", "--json")
		wantCode(t, r, "crew status --label", 0)
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &s), r.Stdout)
		assert.Equal(t, []struct{ Task string }{{"active"}}, s.Active)
		assert.Equal(t, []struct{ Task string }{{"done-fail"}, {"done-ok"}}, s.Finished)
		require.Len(t, s.Queue, 1)
		assert.Equal(t, "queued", s.Queue[0].Task)
		assert.Equal(t, map[string]string{"pipeline": "7"}, s.Queue[0].Labels)
		r = f.run("h3", "status", f.runIDOf("done-ok"))
		assert.Regexp(t, `(?m)^Labels: +pipeline=7,stage=done-ok$`, r.Stdout)

		// crew wait --label waits (proven at its poll failpoint) for the
		// active run and the waiting start, then names the two failures.
		polling, openPoll := f.gate("wait-poll")
		w := f.start("h3", []string{"CREW_FAILPOINT=wait-poll:wait:" + polling}, "wait", "--label", "pipeline=7")
		eventually(t, 20*time.Second, "crew wait --label to wait", func() bool {
			_, err := os.Stat(polling + ".reached")
			return err == nil
		})
		openPoll()
		_, openActive := f.gate("active")
		_, openOther := f.gate("unlabelled")
		openActive()
		openOther()
		wantCode(t, active.wait(t, 20*time.Second), "the labelled active run", 0)
		wantCode(t, other.wait(t, 20*time.Second), "the unlabelled run", 0)
		wantCode(t, queued.wait(t, 20*time.Second), "the labelled waiting start", 3)
		r = w.wait(t, 20*time.Second)
		wantCode(t, r, "crew wait --label: the first failure's code, in creation order", 2)
		assert.Contains(t, r.Stderr, "crew: 2 of 4 runs with label pipeline=7 did not succeed:\n")
		assert.Regexp(t, `(?m)^  r-\S+  done-fail  failed, exit 2\n  r-\S+  queued  failed, exit 3\n$`, r.Stderr)

		r = f.run("h3", "wait", "--label", "pipeline=9")
		wantCode(t, r, "crew wait --label with no such run", 64)
		assert.Contains(t, r.Stderr, "crew: no run has the label pipeline=9 in ")
	}},
	{"HistoryAndPrune", func(t *testing.T, f *fleet) {
		f.initMax(1)
		for _, c := range []string{"exit 0", "exit 2", "exit 0"} {
			f.run("h1", startArgs("hist", []string{"sh", "-c", c})...)
		}
		var h struct {
			Runs []fleetRun `json:"runs"`
		}
		r := f.run("h2", "history", "--json", "hist")
		wantCode(t, r, "crew history", 0)
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &h))
		require.Len(t, h.Runs, 3)
		assert.Equal(t, 0, *h.Runs[0].ExitCode, "newest finish first")
		assert.Equal(t, 2, *h.Runs[1].ExitCode)
		r = f.run("h2", "history", "--json", "--failed")
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &h))
		require.Len(t, h.Runs, 1)
		r = f.run("h3", "prune", "--keep", "1")
		wantCode(t, r, "crew prune --keep 1", 0)
		assert.Contains(t, r.Stdout, "removed 2 finished run(s)")
		r = f.run("h2", "history", "--json")
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &h))
		assert.Len(t, h.Runs, 1)
	}},
	{"Pools", func(t *testing.T, f *fleet) {
		f.initMax(3, "deploy=1")
		f.victim("h1", "deploy-a", nil, "--pool", "deploy")
		r := f.run("h2", startArgs("deploy-b", []string{"true"}, "--pool", "deploy")...)
		wantCode(t, r, "a second start in a full pool", 75)
		assert.Contains(t, r.Stderr, `pool "deploy" is full`)
		r = f.run("h2", startArgs("x", []string{"true"}, "--pool", "nope")...)
		wantCode(t, r, "a start in an unknown pool", 64)
		assert.Contains(t, r.Stderr, `unknown pool "nope"`)
	}},
	// crew stop of a command that traps SIGTERM and exits 0: the run was
	// stopped, whatever its code (issue 22: the etcd store said succeeded).
	{"StopOfATrapThatExitsZero", func(t *testing.T, f *fleet) {
		f.initMax(1)
		ready := filepath.Join(f.dir, "trap-ready")
		p := f.start("h1", nil, startArgs("trapper", []string{"sh", "-c", `trap "exit 0" TERM; : >"$0"; while :; do sleep 0.05; done`, ready})...)
		eventually(t, 20*time.Second, "the trap to be set and the run recorded running", func() bool {
			return exists(ready) && f.runIDOf("trapper") != "" && f.status().Active[0].State == "running"
		})
		id := f.runIDOf("trapper")
		wantCode(t, f.run("h2", "stop", id), "crew stop of the trapping command", 0)
		wantCode(t, p.wait(t, 20*time.Second), "the stopped crew start: the command's own code", 0)
		rec := f.finalRecord(id, 10*time.Second)
		assert.Equal(t, "stopped", rec.State, rec.Reason)
		require.NotNil(t, rec.ExitCode)
		assert.Equal(t, 0, *rec.ExitCode)
		assert.Contains(t, rec.Reason, "stopped by crew stop")
	}},
	// A nested start whose ancestors hold every slot would wait forever:
	// it is refused at once with 78, --wait or not (issue 22: the etcd
	// store said 75, and waited forever with --wait).
	{"NestedStartWouldDeadlock", func(t *testing.T, f *fleet) {
		f.initMax(1)
		for _, inner := range [][]string{{"start", "--wait", "inner", "--", "true"}, {"start", "inner", "--", "true"}} {
			r, _, err := f.tryRunFor(time.Minute, "h1", nil, append([]string{"start", "outer", "--", f.bin}, inner...)...)
			require.NoError(t, err, "the nested start did not end: %v", inner)
			wantCode(t, r, fmt.Sprintf("a nested %v at cap 1", inner), 78)
			assert.Contains(t, r.Stderr, `crew: inner: not admitted: it would wait forever for a slot (1/1 in use), all held by runs it was started from: task "outer" (run r-`)
		}
		assert.Empty(t, f.status().Queue, "the refused waiter left no ticket")
	}},
	// crew wait takes a unique prefix of a run id, as every RUN argument
	// does (issue 22: exit 64 on the etcd store).
	{"WaitByUniquePrefix", func(t *testing.T, f *fleet) {
		f.initMax(1)
		wantCode(t, f.run("h1", startArgs("prefixed", []string{"sh", "-c", "exit 5"})...), "the run to wait for", 5)
		id := f.runIDOf("prefixed")
		prefix := id[:len(id)-10]
		wantCode(t, f.run("h2", "wait", prefix), "crew wait "+prefix, 5)
		wantCode(t, f.run("h2", "status", prefix), "crew status "+prefix, 0)
	}},
	// What a store cannot offer, it refuses as a usage error that says why
	// (docs/etcd.md, "The same crew on both stores").
	{"DocumentedRefusals", func(t *testing.T, f *fleet) {
		f.initMax(1)
		if f.kind == "local" {
			r := f.run("h1", startArgs("t", []string{"true"}, "--lease-ttl", "5s")...)
			wantCode(t, r, "crew start --lease-ttl on a state root", 64)
			assert.Contains(t, r.Stderr, "crew: --lease-ttl is for an etcd store (--store or CREW_STORE); a local run's slot is held by a lock that dies with its processes")
			return
		}
		r := f.run("h1", "init", "--group", "nogroup")
		wantCode(t, r, "crew init --group on an etcd store", 64)
		assert.Contains(t, r.Stderr, "crew: crew init --group and --no-group: not available on etcd store "+f.store+": it has no files to share with a group")
		p, ob := f.victim("h1", "held", nil)
		r = f.run("h2", "stop", "--signal", "SIGSTOP", ob.runID)
		wantCode(t, r, "crew stop --signal SIGSTOP on an etcd store", 64)
		assert.Contains(t, r.Stderr, "crew stop --signal SIGSTOP: not available on etcd store "+f.store+": it would freeze the run's lease guard")
		_ = p
	}},
}

func sharedSuite(t *testing.T, c *etcdCluster) {
	for _, tc := range sharedCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("local", func(t *testing.T) { tc.run(t, newLocalFleet(t)) })
			t.Run("etcd", func(t *testing.T) { tc.run(t, newEtcdFleet(t, c)) })
		})
	}
}
