package e2e

// Signalling only processes the test has proven are its own.
//
// crew's status JSON names pids and process groups, but a pid is only a
// number: once its process is reaped the kernel hands the number to the
// next fork, which on a busy machine can be anyone's within minutes. A
// clean-up that kills "run.PGID" without checking can kill a stranger. So
// every signal the suite sends to a process it did not start itself goes
// through ownProc or ownGroup:
//
//   - A process is proven when it shows an identity that only this test
//     gave it (the run's id in its environment, CREW_RUN_ID, which every
//     process of a run's command inherits; for crew's own processes, the
//     test's private state root in CREW_ROOT), read through /proc while a
//     pidfd pins it, and its start time (field 22 of /proc/<pid>/stat) is
//     recorded with the pidfd.
//   - A proven process is signalled through its pidfd, which never reaches
//     another process, whatever becomes of the pid. (Without pidfds, on a
//     kernel older than 5.3, the start time is checked just before kill.)
//   - A process group is signalled with kill(-pgid) only right after one
//     of its proven members is shown to be unreaped, with the same start
//     time, and still in that group: while a member exists, even as a
//     zombie, the kernel cannot give the group id to anyone else, and no
//     stranger can join the group.
//   - Where this cannot be shown the helper refuses and says why; it never
//     falls back to a bare pid. On macOS (no /proc, no pidfd) it always
//     refuses.
//
// A process the test started itself through exec.Cmd is signalled through
// cmd.Process instead: until the test has waited for it its pid cannot be
// reused, and after the wait os.Process refuses to signal it.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	// errNoProof: this system lacks the facility that proves whose a
	// process is; the helper will not signal anything.
	errNoProof = fmt.Errorf("cannot prove process identity on %s (no /proc and no pidfd): refusing to signal", runtime.GOOS)
	// errGone: the process (or every process of the group) has exited.
	errGone = errors.New("no such process any more")
)

// identity is what a process must show to be proven the test's own.
type identity struct {
	env []string // entries its initial environment must contain, such as "CREW_RUN_ID=r-..."
}

func (id identity) String() string { return strings.Join(id.env, " ") }

// runIdentity is what every process of a run's command shows.
func runIdentity(runID string) identity {
	return identity{env: []string{"CREW_RUN_ID=" + runID}}
}

// crewIdentity is what every crew process the test started shows (a
// detached supervisor included): the test's own state root.
func (e *env) crewIdentity() identity {
	return identity{env: []string{"CREW_ROOT=" + e.root}}
}

// procStat is the part of /proc/<pid>/stat the proofs use.
type procStat struct {
	state byte
	pgrp  int
	start uint64 // clock ticks after boot
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return procStat{}, errGone
		}
		return procStat{}, err
	}
	// "pid (comm) state ppid pgrp ..."; comm may hold spaces and parens.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed %q", pid, b)
	}
	// f[k-3] is field k of proc(5): 3 state, 5 pgrp, 22 starttime.
	pgrp, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed %q", pid, b)
	}
	return procStat{state: f[0][0], pgrp: pgrp, start: start}, nil
}

// ownProc is a process proven to be the test's own.
type ownProc struct {
	pid   int
	start uint64
	fd    int // pidfd, or -1 where the kernel has none
}

// proveProc proves that pid is a living process that shows id. The caller
// releases the proof.
func proveProc(pid int, id identity) (*ownProc, error) {
	if !procfsProofs {
		return nil, errNoProof
	}
	if pid <= 1 {
		return nil, fmt.Errorf("pid %d is nobody's to signal", pid)
	}
	if len(id.env) == 0 {
		return nil, errors.New("an empty identity proves nothing")
	}
	// Pin whatever process has the pid now, then check that it is ours.
	fd, err := pidfdOpen(pid)
	if errors.Is(err, syscall.ESRCH) {
		return nil, errGone
	} else if err != nil {
		return nil, fmt.Errorf("pidfd_open(%d): %w", pid, err)
	}
	p := &ownProc{pid: pid, fd: fd}
	fail := func(err error) (*ownProc, error) { p.release(); return nil, err }
	st, err := readStat(pid)
	if err != nil {
		return fail(err)
	}
	if st.state == 'Z' {
		return fail(errGone)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return fail(errGone)
		}
		return fail(err)
	}
	entries := map[string]bool{}
	for _, kv := range bytes.Split(environ, []byte{0}) {
		entries[string(kv)] = true
	}
	for _, want := range id.env {
		if !entries[want] {
			return fail(fmt.Errorf("pid %d is not the test's own: its environment has no %s", pid, want))
		}
	}
	// The environment read was of the process with this start time ...
	again, err := readStat(pid)
	if err != nil {
		return fail(err)
	}
	if again.start != st.start {
		return fail(fmt.Errorf("pid %d was reused while it was being proven", pid))
	}
	p.start = st.start
	// ... and that is the process the pidfd pins, if the pidfd's process
	// is still there: it held the pid all along.
	if !p.unreaped() {
		return fail(errGone)
	}
	return p, nil
}

// unreaped reports whether the proven process still exists, if only as a
// zombie (and so still holds its pid and its place in its group).
func (p *ownProc) unreaped() bool {
	if p.fd >= 0 {
		return pidfdSignal(p.fd, 0) == nil
	}
	st, err := readStat(p.pid)
	return err == nil && st.start == p.start
}

// alive reports whether the proven process runs (exists and is not a
// zombie).
func (p *ownProc) alive() bool {
	st, err := readStat(p.pid)
	return err == nil && st.start == p.start && st.state != 'Z' && p.unreaped()
}

// inGroup reports whether the proven process, unreaped, is in group pgid.
func (p *ownProc) inGroup(pgid int) bool {
	st, err := readStat(p.pid)
	if err != nil || st.start != p.start || st.pgrp != pgid {
		return false
	}
	// The stat read was of our process if it still exists now.
	return p.unreaped()
}

// signal sends sig to the proven process and to nobody else.
func (p *ownProc) signal(sig syscall.Signal) error {
	if p.fd >= 0 {
		err := pidfdSignal(p.fd, sig)
		if errors.Is(err, syscall.ESRCH) {
			return errGone
		}
		return err
	}
	// No pidfd: the start time still names our process, microseconds
	// before the kill.
	if st, err := readStat(p.pid); err != nil || st.start != p.start {
		return errGone
	}
	return syscall.Kill(p.pid, sig)
}

func (p *ownProc) release() {
	if p != nil && p.fd >= 0 {
		_ = syscall.Close(p.fd)
		p.fd = -1
	}
}

// groupMembers lists the pids whose process group is pgid.
func groupMembers(pgid int) ([]int, error) {
	if !procfsProofs {
		return nil, errNoProof
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil && st.pgrp == pgid {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// ownGroup is a process group whose members the test can prove are its
// own.
type ownGroup struct {
	pgid    int
	id      identity
	members []*ownProc // proven when the test learnt the group
}

// proveGroup proves the members of process group pgid that show id now;
// it fails if none does. Release the proof when done.
func proveGroup(pgid int, id identity) (*ownGroup, error) {
	g, err := newGroup(pgid, id)
	if err != nil {
		return nil, err
	}
	if err := g.proveMembers(); err != nil {
		return nil, err
	}
	return g, nil
}

func newGroup(pgid int, id identity) (*ownGroup, error) {
	if !procfsProofs {
		return nil, errNoProof
	}
	if pgid <= 1 {
		return nil, fmt.Errorf("process group %d is nobody's to signal", pgid)
	}
	return &ownGroup{pgid: pgid, id: id}, nil
}

// proveMembers adds the group's current members that show the identity.
func (g *ownGroup) proveMembers() error {
	pids, err := groupMembers(g.pgid)
	if err != nil {
		return err
	}
	var refused []string
	for _, pid := range pids {
		p, err := proveProc(pid, g.id)
		switch {
		case err == nil && p.inGroup(g.pgid):
			g.members = append(g.members, p)
		case err == nil:
			p.release()
		case !errors.Is(err, errGone):
			refused = append(refused, err.Error())
		}
	}
	if len(g.members) > 0 {
		return nil
	}
	if len(refused) > 0 {
		return fmt.Errorf("process group %d: no member shows %s: %s", g.pgid, g.id, strings.Join(refused, "; "))
	}
	return errGone
}

// signal sends sig to the whole group, right after showing that one of
// its proven members is still in it. errGone means no member showing the
// identity is left.
func (g *ownGroup) signal(sig syscall.Signal) error {
	holds := func() bool {
		for _, m := range g.members {
			if m.inGroup(g.pgid) {
				return true
			}
		}
		return false
	}
	if !holds() {
		// The members proven earlier are gone; prove the ones there are
		// now (a command's grandchildren, say).
		if err := g.proveMembers(); err != nil {
			return err
		}
		if !holds() {
			return errGone
		}
	}
	return syscall.Kill(-g.pgid, sig)
}

func (g *ownGroup) release() {
	for _, m := range g.members {
		m.release()
	}
	g.members = nil
}

// requireProof fails the test on err, or skips it where proofs are not
// possible at all (macOS): a test that has to signal a process it cannot
// prove is its own does not run, rather than guess.
func requireProof(t *testing.T, err error, what string) {
	t.Helper()
	if errors.Is(err, errNoProof) {
		t.Skipf("%s: %v", what, err)
	}
	require.NoError(t, err, what)
}

// proveRunGroup proves the process group of a run's command.
func (e *env) proveRunGroup(run runJSON) *ownGroup {
	e.t.Helper()
	g, err := proveGroup(run.PGID, runIdentity(run.RunID))
	requireProof(e.t, err, fmt.Sprintf("prove process group %d of run %s", run.PGID, run.RunID))
	e.t.Cleanup(g.release)
	return g
}

// proveRunTask proves a run's command process.
func (e *env) proveRunTask(run runJSON) *ownProc {
	e.t.Helper()
	p, err := proveProc(run.TaskPID, runIdentity(run.RunID))
	requireProof(e.t, err, fmt.Sprintf("prove command pid %d of run %s", run.TaskPID, run.RunID))
	e.t.Cleanup(p.release)
	return p
}

// killRunAtCleanup makes sure the process group of run's command is gone
// at the end of the test, whatever crew did: it proves the group's
// members now and SIGKILLs the group at clean-up only while one of them
// (or a member that shows the run's id then) is still in it.
func (e *env) killRunAtCleanup(run runJSON) {
	t := e.t
	t.Helper()
	g, err := newGroup(run.PGID, runIdentity(run.RunID))
	if err != nil {
		t.Logf("clean-up will not signal process group %d of run %s: %v", run.PGID, run.RunID, err)
		return
	}
	if err := g.proveMembers(); err != nil && !errors.Is(err, errGone) {
		t.Logf("process group %d of run %s: %v (clean-up will check again)", run.PGID, run.RunID, err)
	}
	t.Cleanup(func() {
		defer g.release()
		if err := g.signal(syscall.SIGKILL); err != nil && !errors.Is(err, errGone) {
			t.Logf("clean-up did not kill process group %d of run %s: %v", run.PGID, run.RunID, err)
		}
	})
}

// killProven SIGKILLs pid if it proves to be the test's own, and logs why
// not otherwise. It is for clean-ups: nothing fails the test.
func killProven(t *testing.T, what string, pid int, id identity) {
	p, err := proveProc(pid, id)
	if err == nil {
		err = p.signal(syscall.SIGKILL)
		p.release()
	}
	if err != nil && !errors.Is(err, errGone) {
		t.Logf("not killing %s (pid %d): %v", what, pid, err)
	}
}

// killChildGroup signals the process group led by a child the test started
// itself with Setpgid. Until the test waits for the child, the child, even
// as a zombie, keeps its pid, and with it the group id, from being reused.
func killChildGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.Process == nil || cmd.ProcessState != nil {
		return errors.New("not started, or already waited for: its group id may be anyone's")
	}
	if cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setpgid || cmd.SysProcAttr.Pgid != 0 {
		return errors.New("the child does not lead a process group of its own")
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
}

// TestProcessProofs checks the helpers above on processes of the test's
// own: they signal what shows the identity, refuse what does not, and stop
// at a process that has been reaped.
func TestProcessProofs(t *testing.T) {
	if !procfsProofs {
		_, err := proveProc(os.Getpid(), identity{env: []string{"X=y"}})
		require.ErrorIs(t, err, errNoProof)
		t.Skip(err)
	}
	marker := fmt.Sprintf("CREW_E2E_PROOF=%d", os.Getpid())
	// A group of two, both the test's children (so that the test reaps
	// them, not PID 1 at its own pace): a leader and a member.
	sleeper := func(pgid int) *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		cmd.Env = append(os.Environ(), marker)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
		require.NoError(t, cmd.Start())
		return cmd
	}
	lead := sleeper(0)
	t.Cleanup(func() { _ = killChildGroup(lead, syscall.SIGKILL); _ = lead.Wait() })
	pid := lead.Process.Pid
	member := sleeper(pid)
	t.Cleanup(func() { _ = member.Process.Kill(); _ = member.Wait() })
	pids, err := groupMembers(pid)
	require.NoError(t, err)
	require.ElementsMatch(t, []int{pid, member.Process.Pid}, pids)

	_, err = proveProc(pid, identity{env: []string{marker + "0"}})
	assert.ErrorContains(t, err, "is not the test's own: its environment has no "+marker+"0")
	_, err = proveProc(pid, identity{})
	assert.Error(t, err, "an empty identity proves nothing")
	for _, bad := range []int{-1, 0, 1} {
		_, err = proveProc(bad, identity{env: []string{marker}})
		assert.Error(t, err, "pid %d", bad)
		_, err = proveGroup(bad, identity{env: []string{marker}})
		assert.Error(t, err, "pgid %d", bad)
	}
	_, err = proveGroup(os.Getpid(), identity{env: []string{marker}})
	assert.Error(t, err, "the test's own group does not show the marker")

	leader, err := proveProc(pid, identity{env: []string{marker}})
	require.NoError(t, err)
	defer leader.release()
	assert.True(t, leader.alive())
	assert.True(t, leader.inGroup(pid))
	g, err := proveGroup(pid, identity{env: []string{marker}})
	require.NoError(t, err)
	defer g.release()
	assert.Len(t, g.members, 2, "the leader and the member both show the marker")

	require.NoError(t, g.signal(syscall.SIGKILL))
	eventually(t, 10*time.Second, "the leader to die", func() bool { return !leader.alive() })
	assert.True(t, leader.unreaped(), "a zombie keeps its pid until the test waits for it")
	_ = lead.Wait()
	assert.False(t, leader.unreaped())
	assert.ErrorIs(t, leader.signal(syscall.SIGKILL), errGone)
	// The member is a zombie now: it still holds the group, and
	// signalling the group is harmless.
	assert.NoError(t, g.signal(syscall.SIGKILL))
	_ = member.Wait()
	assert.ErrorIs(t, g.signal(syscall.SIGKILL), errGone, "nothing of the group is left to signal")
}

// A test that ends with crew killed by its cleanup (a gate opened too
// late, or never) must not leave the run's command behind: newEnv's
// cleanup stops every run still active before the test's directory goes.
// Without it, gate loops from passing tests ran on for hours, polling a
// directory that no longer existed.
func TestCleanupStopsWhatATestLeftRunning(t *testing.T) {
	var task *ownProc
	t.Run("leaves a run behind", func(t *testing.T) {
		e := newEnv(t)
		pidFile := filepath.Join(e.dir, "pid")
		e.start(nil, "start", "left", "--", "sh", "-c", `echo $$ > "$1"; exec sleep 600`, "x", pidFile)
		run := e.activeRun("left")
		eventually(t, 10*time.Second, "the command's pid", func() bool { return exists(pidFile) })
		var err error
		task, err = proveProc(run.TaskPID, runIdentity(run.RunID))
		requireProof(t, err, "the left run's command")
		// The test ends here: its cleanup kills crew start, then stops the
		// run, then removes the directory.
	})
	if task == nil {
		return
	}
	defer func() {
		if task.alive() {
			_ = task.signal(syscall.SIGKILL) // proven ours: leave nothing behind even on failure
		}
		task.release()
	}()
	eventually(t, 10*time.Second, "the left run's command to be gone", func() bool { return !task.alive() })
}
