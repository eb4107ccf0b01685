package e2e

// crew stop signals only what the kernel shows to be the run's (issue 10,
// items 1-3): a record or ticket that names another process's pid or
// group, or pid/pgid 0 or 1, never gets anyone else signalled; an orphan
// whose start was never recorded can still be stopped; a detached run's
// command inherits the owner lock alone.
//
// Each test's victim is a process the test started itself, in a process
// group of its own, and has not waited for: its pid and group cannot pass
// to anyone else, and a victim that was signalled shows as a zombie.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startVictim starts `sleep 60` in a process group of its own; crew must
// never signal it.
func startVictim(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = killChildGroup(cmd, syscall.SIGKILL); _ = cmd.Wait() })
	return cmd
}

// victimAlive: the unwaited child still runs (a signalled one is a zombie).
func victimAlive(t *testing.T, cmd *exec.Cmd) bool {
	t.Helper()
	st, err := readStat(cmd.Process.Pid)
	if errors.Is(err, errNoProof) || (err != nil && !procfsProofs) {
		t.Skip("needs /proc")
	}
	require.NoError(t, err)
	return st.state != 'Z'
}

// editActive rewrites fields of a run's active record the way a hostile or
// corrupt state root would, atomically (a temporary file, then rename).
func (e *env) editActive(id string, fields map[string]any) {
	e.t.Helper()
	path := activeRecordPath(e.root, id)
	editJSON(e.t, path, fields)
}

func editJSON(t *testing.T, path string, fields map[string]any) {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(readRecordJSON(t, path), &m))
	for k, v := range fields {
		m[k] = v
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	tmp := filepath.Join(filepath.Dir(path), ".edit-"+filepath.Base(path))
	require.NoError(t, os.WriteFile(tmp, recordFile(path, b), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// startRun starts a foreground run of task whose command writes its pid
// to a file and waits for a gate, and returns it with the command's pid,
// proven to be the run's. With orphan, the crew start supervising it is
// SIGKILLed first (the test's own child), leaving the command running.
func (e *env) startRun(task string, orphan bool) (p *proc, run runJSON, cmd *ownProc) {
	t := e.t
	t.Helper()
	gate, _ := e.gate(task + "-gate")
	pidFile := filepath.Join(e.dir, task+".pid")
	p = e.start(nil, "start", task, "--", "sh", "-c", `echo $$ > "$1"; while [ ! -e "$2" ]; do sleep 0.01; done`, "x", pidFile, gate)
	run = e.activeRun(task)
	e.killRunAtCleanup(run)
	cmd = e.proveRunTask(run)
	if orphan {
		require.Equal(t, p.cmd.Process.Pid, run.SupervisorPID, "the supervisor is the crew start the test ran")
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
		p.wait(t, 10*time.Second)
		eventually(t, 10*time.Second, "status to flag the orphan", func() bool { return e.runRecord(run.RunID).Orphaned })
	}
	return p, run, cmd
}

// requireStopped checks that crew stop ended the real run.
func (e *env) requireStopped(id string, stop result, cmd *ownProc) {
	t := e.t
	t.Helper()
	require.Equal(t, 0, stop.Code, stop.Stderr)
	rec := e.runRecord(id)
	assert.Equal(t, "stopped", rec.State)
	assert.Contains(t, rec.Reason, "stopped by crew stop (pid ")
	eventually(t, 10*time.Second, "the run's command to be gone", func() bool { return !cmd.alive() })
	assert.Zero(t, e.status().SlotsInUse)
}

// TestStopIgnoresAnEditedProcessGroup: a record whose pgid names another
// process's group gets that process nothing; the real run is stopped.
func TestStopIgnoresAnEditedProcessGroup(t *testing.T) {
	for _, mode := range []string{"supervised", "orphan"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			victim := startVictim(t)
			_, run, cmd := e.startRun("real", mode == "orphan")
			e.editActive(run.RunID, map[string]any{"pgid": victim.Process.Pid, "taskPid": victim.Process.Pid})

			stop := e.run("stop", "--grace", "300ms", run.RunID)
			assert.True(t, victimAlive(t, victim), "crew stop signalled the group the record named: %s", stop.Stderr)
			e.requireStopped(run.RunID, stop, cmd)
		})
	}
}

// TestStopNeverSignalsGroupZero: pgid 0 and supervisorPid 0 in a record
// would make kill() signal crew stop's own process group. crew stop runs
// here in the victim's group.
func TestStopNeverSignalsGroupZero(t *testing.T) {
	for _, mode := range []string{"supervised", "orphan"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			victim := startVictim(t)
			_, run, cmd := e.startRun("real", mode == "orphan")
			e.editActive(run.RunID, map[string]any{"pgid": 0, "taskPid": 0, "supervisorPid": 0})

			stopper := e.command(nil, "stop", "--grace", "300ms", run.RunID)
			stopper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: victim.Process.Pid}
			out, err := stopper.CombinedOutput()
			assert.True(t, victimAlive(t, victim), "crew stop signalled its own process group: %s", out)
			require.NoError(t, err, "crew stop: %s", out)
			e.requireStopped(run.RunID, result{Stderr: string(out)}, cmd)
		})
	}
}

// TestStopNeverSignalsEveryone: pgid 1 in a record would make kill(-1)
// signal every process crew may signal. crew stop runs inside a pid (and
// user) namespace of its own with the victim, so that on a crew that does
// call kill(-1) only the victim dies, not the machine's processes.
func TestStopNeverSignalsEveryone(t *testing.T) {
	if !procfsProofs {
		t.Skip("needs Linux namespaces")
	}
	if out, err := exec.Command("unshare", "-Urpf", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot make a user and pid namespace here: %v %s", err, out)
	}
	for _, mode := range []string{"supervised", "orphan"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			_, run, cmd := e.startRun("real", mode == "orphan")
			e.editActive(run.RunID, map[string]any{"pgid": 1, "taskPid": 1, "supervisorPid": 1})

			// The run's processes are outside the namespace, so an orphan
			// cannot be proven from inside it: crew stop must refuse.
			script := `sleep 60 & v=$!; "$0" stop --grace 300ms "$1"; rc=$?; ` +
				`if kill -0 $v 2>/dev/null; then echo victim-alive; fi; kill -9 $v; exit $rc`
			stopper := exec.Command("unshare", "-Urpf", "--mount-proc", "sh", "-c", script, e.bin, run.RunID)
			stopper.Env, stopper.Dir = e.environ(), e.dir
			out, err := runWithTimeout(stopper, time.Minute)
			assert.Contains(t, string(out), "victim-alive", "crew stop signalled a process outside the run")
			if mode == "orphan" {
				var ee *exec.ExitError
				require.ErrorAs(t, err, &ee, "%s", out)
				assert.Equal(t, 125, ee.ExitCode(), "%s", out)
				assert.Contains(t, string(out), "nothing was signalled")
				// From outside the namespace the orphan can be proven. The
				// record gets its true numbers back first: a crew that
				// signalled by the record would call kill(-1) out here, on
				// every process of the machine.
				e.editActive(run.RunID, map[string]any{"pgid": run.PGID, "taskPid": run.TaskPID, "supervisorPid": run.SupervisorPID})
				e.requireStopped(run.RunID, e.run("stop", "--grace", "300ms", run.RunID), cmd)
				return
			}
			require.NoError(t, err, "%s", out)
			e.requireStopped(run.RunID, result{Stderr: string(out)}, cmd)
		})
	}
}

// runWithTimeout runs cmd (the test's own child) and SIGKILLs it if it
// outlives the timeout.
func runWithTimeout(cmd *exec.Cmd, timeout time.Duration) ([]byte, error) {
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	timer := time.AfterFunc(timeout, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Wait()
	return []byte(out.String()), err
}

// TestStopWaiterNeverSignalsTheTicketsPID: a ticket whose pid names
// another process gets that process nothing; the waiting start leaves the
// queue all the same.
func TestStopWaiterNeverSignalsTheTicketsPID(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	release, holder := e.holdSlot("holder")
	defer func() { release(); holder.wait(t, 10*time.Second) }()
	victim := startVictim(t)
	w := e.start(nil, "start", "--wait", "waiter", "--", "true")
	e.waitQueued("waiter")
	id := e.queue().Queue[0].RunID
	editJSON(t, filepath.Join(e.root, "queue", id+".json"), map[string]any{"pid": victim.Process.Pid})

	r := e.run("stop", "waiter")
	assert.True(t, victimAlive(t, victim), "crew stop signalled the pid the ticket named: %s", r.Stderr)
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "to leave the queue")
	res := w.wait(t, 10*time.Second)
	assert.Equal(t, 143, res.Code, "the waiter leaves like one that got SIGTERM: %s", res.Stderr)
	assert.Contains(t, res.Stderr, "stopped by crew stop (pid ")
	assert.Empty(t, e.queue().Queue)
	assert.NoFileExists(t, filepath.Join(e.root, "owners", id+".stop"), "no stop request is left behind")
}

// TestStopOrphanWhoseStartWasNeverRecorded: crew start killed between
// starting the command and recording it running leaves an orphan with no
// pid in its record. status lists the pids that hold its slot, and crew
// stop finds and stops them.
func TestStopOrphanWhoseStartWasNeverRecorded(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	gate, _ := e.gate("never")
	pidFile := filepath.Join(e.dir, "cmd.pid")
	p := e.start([]string{"CREW_FAILPOINT=launched:kill"}, "start", "unrecorded", "--", "sh", "-c",
		`echo $$ > "$1"; sh -c 'trap "" TERM; while [ ! -e "$1" ]; do sleep 0.01; done' x "$2" & wait`, "x", pidFile, gate)
	assert.Equal(t, 137, p.wait(t, 10*time.Second).Code)
	s := e.status()
	require.Len(t, s.Active, 1)
	run := s.Active[0]
	require.Equal(t, "provisioning", run.State)
	require.Zero(t, run.TaskPID, "the start was never recorded")
	require.True(t, run.Orphaned)
	eventually(t, 10*time.Second, "the command to write its pid", func() bool { return exists(pidFile) })
	pid := readPID(t, pidFile)
	cmd, err := proveProc(pid, runIdentity(run.RunID))
	requireProof(t, err, "prove the command")
	t.Cleanup(func() { killProven(t, "the unrecorded command", pid, runIdentity(run.RunID)); cmd.release() })

	var v struct {
		HolderPIDs []int `json:"holderPids"`
	}
	r := e.run("status", "--json", run.RunID)
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &v))
	assert.Contains(t, v.HolderPIDs, pid, "status names the processes that hold the orphan's slot")
	assert.GreaterOrEqual(t, len(v.HolderPIDs), 2, "the command and its grandchild (and its sleeps) hold it")
	text := e.run("status", run.RunID).Stdout
	assert.Contains(t, text, "Slot held by:")
	assert.Contains(t, text, strconv.Itoa(pid))

	stop := e.run("stop", "--grace", "300ms", "unrecorded")
	e.requireStopped(run.RunID, stop, cmd)
	rec := e.runRecord(run.RunID)
	assert.Contains(t, rec.Reason, "SIGKILL after the 300ms grace period", "the grandchild ignored SIGTERM")
	// The command leads its own group: the record names that group. (Not
	// its pid in the list of pids: that list names the process through
	// which each group was signalled, first in pid order, and pids wrap
	// here, so one of its sleeps can come first.)
	assert.Contains(t, rec.Reason, fmt.Sprintf("process group %d", pid), "the record says what was signalled")
	assert.Regexp(t, `sent SIGTERM to pids? \d+`, rec.Reason)
	assert.Equal(t, 0, e.run("start", "next", "--", "true").Code, "the slot is free")
}

// Issue 23, item 10: an orphan whose start was never recorded (taskPid 0)
// was stopped correctly, but neither `crew status` nor `crew recover`
// named its processes, though crew proves them when it stops them. Both
// (text and JSON) name the processes shown holding its owner lock, and
// where the kernel cannot show them (no /proc) say so instead of 0.
func TestOrphanNamesTheProcessesThatHoldItsSlot(t *testing.T) {
	e := newEnv(t)
	gate, openGate := e.gate("end")
	pidFile := filepath.Join(e.dir, "cmd.pid")
	p := e.start([]string{"CREW_FAILPOINT=launched:kill"}, "start", "unrecorded", "--", "sh", "-c",
		`echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; while [ ! -e "$2" ]; do sleep 0.01; done`, "x", pidFile, gate)
	assert.Equal(t, 137, p.wait(t, 10*time.Second).Code)
	eventually(t, 10*time.Second, "the command to write its pid", func() bool { return exists(pidFile) })
	pid := readPID(t, pidFile)

	s := e.status()
	require.Len(t, s.Active, 1)
	run := s.Active[0]
	require.True(t, run.Orphaned)
	require.Zero(t, run.TaskPID, "the start was never recorded")
	text := e.run("status").Stdout
	note := regexp.MustCompile(`(?m)^  ` + shortID(run.RunID) + `: orphaned: .*$`).FindString(text)
	require.NotEmpty(t, note, "status notes the orphan: %s", text)
	rep, r := e.recover()
	require.Equal(t, []string{"orphaned"}, rep.outcomesFor(run.RunID), r.Stdout)
	item := rep.Items[0]
	recoverText := e.run("recover").Stdout

	if procfsProofs {
		assert.Contains(t, run.HolderPIDs, pid, "status --json names the command")
		assert.Empty(t, run.HoldersUnknown)
		assert.Regexp(t, `holds its slot: held by pids? [0-9, ]*\b`+strconv.Itoa(pid)+`\b`, note)
		assert.Contains(t, item.HolderPIDs, pid, "recover --json names the command")
		assert.Regexp(t, `still runs and holds the slot \(pids? [0-9, ]*\b`+strconv.Itoa(pid)+`\b[0-9, ]* holds? it\)`, item.Reason)
		assert.Regexp(t, `\(pids? [0-9, ]*\b`+strconv.Itoa(pid)+`\b`, recoverText)
	} else {
		assert.Empty(t, run.HolderPIDs)
		assert.Contains(t, run.HoldersUnknown, "has no /proc")
		assert.Contains(t, note, "holds its slot: which processes, crew cannot tell: ")
		assert.Contains(t, item.HoldersUnknown, "has no /proc")
		assert.Contains(t, item.Reason, "(which processes hold it, crew cannot tell: ")
	}
	openGate()
	eventually(t, 10*time.Second, "the orphan to end and free its slot", func() bool { return e.status().SlotsInUse == 0 })
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

// TestDetachedSupervisorKilledIsAnOrphan: the command of a detached run
// inherits the owner lock (fd 3) and nothing else of its supervisor's, so
// once the supervisor is SIGKILLed, status and recover call the run
// orphaned instead of supervised forever.
func TestDetachedSupervisorKilledIsAnOrphan(t *testing.T) {
	e := newEnv(t)
	gate, openGate := e.gate("go-on")
	fdList := filepath.Join(e.dir, "fds")
	r := e.run("start", "--detach", "bg", "--", "sh", "-c",
		`ls -l /proc/$$/fd > "$1.tmp"; mv "$1.tmp" "$1"; while [ ! -e "$2" ]; do sleep 0.01; done`, "x", fdList, gate)
	require.Equal(t, 0, r.Code, r.Stderr)
	id := strings.TrimSpace(r.Stdout)
	e.killDetachedAtCleanup(id)
	run := e.runRecord(id)
	require.True(t, run.SupervisorAlive)
	if procfsProofs {
		eventually(t, 10*time.Second, "the command to list its descriptors", func() bool { return exists(fdList) })
		b, err := os.ReadFile(fdList)
		require.NoError(t, err)
		fds := fdTargets(string(b))
		assert.Contains(t, fds["3"], filepath.Join("owners", id+".lock"), "the command holds the owner lock as fd 3")
		for fd, target := range fds {
			assert.NotContains(t, target, "supervisor.lock", "fd %s: the command must not hold the supervisor lock", fd)
		}
		assert.NotContains(t, fds, "4", "the supervisor lock's descriptor leaked")
		assert.NotContains(t, fds, "5", "the handover pipe leaked")
	}

	sup, err := proveProc(run.SupervisorPID, e.crewIdentity())
	requireProof(t, err, "prove the detached supervisor")
	defer sup.release()
	require.NoError(t, sup.signal(syscall.SIGKILL))
	eventually(t, 10*time.Second, "status to see the supervisor gone", func() bool {
		v := e.runRecord(id)
		return !v.SupervisorAlive && v.Orphaned && v.OwnerAlive
	})
	rep, _ := e.recover()
	assert.Equal(t, []string{"orphaned"}, rep.outcomesFor(id))
	openGate()
	eventually(t, 10*time.Second, "the orphan to end and free its slot", func() bool { return e.status().SlotsInUse == 0 })
}

// fdTargets parses `ls -l /proc/PID/fd`: descriptor to target.
func fdTargets(ls string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(ls, "\n") {
		name, target, ok := strings.Cut(line, " -> ")
		if f := strings.Fields(name); ok && len(f) > 0 {
			out[f[len(f)-1]] = target
		}
	}
	return out
}

// TestStopContinuesAStoppedGroup: crew stop sends SIGCONT after its
// signal, so a stopped (Ctrl-Z, SIGSTOP) command acts on it at once
// instead of sitting out the grace period until SIGKILL.
func TestStopContinuesAStoppedGroup(t *testing.T) {
	for _, mode := range []string{"supervised", "orphan"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			_, run, cmd := e.startRun("paused", mode == "orphan")
			require.NoError(t, cmd.signal(syscall.SIGSTOP))
			eventually(t, 10*time.Second, "the command to stop", func() bool {
				st, err := readStat(cmd.pid)
				return err == nil && st.state == 'T'
			})
			start := time.Now()
			stop := e.run("stop", "--grace", "20s", run.RunID)
			assert.Less(t, time.Since(start), 10*time.Second, "the stopped command was continued, not left to the grace period")
			e.requireStopped(run.RunID, stop, cmd)
			rec := e.runRecord(run.RunID)
			assert.NotContains(t, rec.Reason, "SIGKILL")
		})
	}
}

// TestStopFallsBackWhenTheSupervisorDoesNotAnswer: a supervisor that is
// stopped cannot carry out the request; crew stop then signals the
// command's processes itself (found through the owner lock), says why it
// could not finish, and the supervisor records the run once continued.
func TestStopFallsBackWhenTheSupervisorDoesNotAnswer(t *testing.T) {
	if !procfsProofs {
		t.Skip("the fallback needs /proc")
	}
	e := newEnv(t)
	p, run, cmd := e.startRun("frozen", false)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP)) // our own child
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })

	stop := e.run("stop", "--grace", "300ms", run.RunID)
	assert.Equal(t, 125, stop.Code, stop.Stderr)
	assert.Contains(t, stop.Stderr, "did not take up the stop request")
	assert.Contains(t, stop.Stderr, fmt.Sprintf("its supervisor (pid %d) is stopped", p.cmd.Process.Pid))
	assert.False(t, cmd.alive(), "crew stop signalled the command itself")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
	assert.Equal(t, 143, p.wait(t, 10*time.Second).Code)
	rec := e.runRecord(run.RunID)
	assert.Equal(t, "stopped", rec.State)
	assert.Contains(t, rec.Reason, "stopped by crew stop (pid ")
}

// TestStopReachesARunBeforeItsCommandStarts: a run stopped between its
// admission and its launch (held there by a failpoint) is never launched:
// its supervisor finds the request before it starts the command. crew stop
// itself, finding no command to signal and a supervisor that does not
// answer, says so and leaves the request in place.
//
// The same holds for a detached start: its supervisor finds the request,
// and crew start --detach exits as a foreground start would (143), not as
// if crew had failed.
func TestStopReachesARunBeforeItsCommandStarts(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run(fmt.Sprintf("detach=%v", detach), func(t *testing.T) { stopBeforeCommandStarts(t, detach) })
	}
}

func stopBeforeCommandStarts(t *testing.T, detach bool) {
	e := newEnv(t)
	gate, openGate := e.gate("admitted")
	marker := filepath.Join(e.dir, "ran")
	args := []string{"start", "early", "--", "touch", marker}
	if detach {
		args = []string{"start", "--detach", "early", "--", "touch", marker}
	}
	p := e.start([]string{"CREW_FAILPOINT=admitted:wait:" + gate}, args...)
	eventually(t, 10*time.Second, "the start to be admitted", func() bool { return exists(gate + ".reached") })

	stop := e.run("stop", "--grace", "300ms", "early")
	assert.Equal(t, 125, stop.Code, stop.Stderr)
	assert.Contains(t, stop.Stderr, "did not take up the stop request")
	if procfsProofs {
		assert.Contains(t, stop.Stderr, "the stop request stays")
	}
	openGate()
	r := p.wait(t, 10*time.Second)
	assert.Equal(t, 143, r.Code, r.Stderr)
	assert.Regexp(t, `^crew: early: stopped by crew stop \(pid \d+.*\) before the command started; run r-\S+ recorded as stopped\n$`, r.Stderr)
	assert.NoFileExists(t, marker, "the command never ran")
	rec := e.status("early").Finished[0]
	assert.Equal(t, "stopped", rec.State)
	assert.Contains(t, rec.Reason, "before the command started; it was never run")
	assert.Contains(t, rec.Reason, "stopped by crew stop (pid ")
}
