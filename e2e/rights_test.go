package e2e

// A state root shared with a group gives no member another's rights: only
// a run's own user, or root, may stop it or take it out of the queue,
// whatever crew stop is asked and whatever a request file says. These
// tests run crew as a second user (uid member, in the test's own group, to
// which the root is shared) through os/exec credentials; no user needs to
// exist in /etc/passwd.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
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

// member is the uid of the second user: nobody's, which owns no file a
// test could touch.
const member = 65534

// sharedEnv is an env whose state root is shared with the test's own group
// (crew init --group), in a directory the member can reach, with a copy of
// crew the member can run.
type sharedEnv struct {
	*env
	gid uint32
}

func newSharedEnv(t *testing.T, maxInProgress int) *sharedEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running crew as a second user needs root (CI runs the tests as root)")
	}
	g, err := user.LookupGroupId(strconv.Itoa(os.Getegid()))
	if err != nil {
		t.Skipf("the test's group (gid %d) has no name here, and crew init --group needs one: %v", os.Getegid(), err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	// The test's temporary directories are 0700, and so is the one the
	// e2e binary is built in: the member could reach neither. base is
	// removed after everything else, crew stop of leftover runs included.
	base, err := os.MkdirTemp("", "crew-rights-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	bin := filepath.Join(base, "crew")
	copyFile(t, crewBin, bin, 0o755)
	scratch := filepath.Join(base, "scratch")
	require.NoError(t, os.Mkdir(scratch, 0o755))
	require.NoError(t, os.Chmod(scratch, 0o777|os.ModeSticky)) // both users' gates and observer files

	e := newEnv(t)
	e.bin, e.root, e.dir = bin, filepath.Join(base, "state"), scratch
	r := e.run("init", "--max", strconv.Itoa(maxInProgress), "--group", g.Name)
	require.Equal(t, 0, r.Code, r.Stderr)
	return &sharedEnv{env: e, gid: uint32(gid)}
}

// asMember is crew with args, run as the member: its own uid, the shared
// group as its only group.
func (e *sharedEnv) asMember(args ...string) *exec.Cmd {
	cmd := e.command([]string{"HOME=" + e.dir}, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: member, Gid: e.gid, Groups: []uint32{e.gid}}}
	return cmd
}

func (e *sharedEnv) runAsMember(args ...string) result {
	e.t.Helper()
	return runCmd(e.t, e.asMember(args...))
}

func (e *sharedEnv) startAsMember(args ...string) *proc {
	e.t.Helper()
	p, err := startProc(e.t, e.asMember(args...), args)
	require.NoError(e.t, err)
	return p
}

// ticker is a command that appends a line to file every 20 ms, and, when
// it gets SIGTERM, writes file.signalled and exits: what it does is what
// an independent observer of the command sees. Its output goes nowhere, so
// that an orphan's shell, whose pipes lost their reader with its
// supervisor, is not killed by SIGPIPE before its trap has run.
func ticker(file string) []string {
	return []string{"sh", "-c", `exec >/dev/null 2>&1; trap 'echo TERM > "$1.signalled"; exit 143' TERM; while :; do echo . >> "$1"; sleep 0.02; done`, "ticker", file}
}

func sizeOf(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// ticking waits until the ticker writing file has written more than it
// had: it runs, unsignalled.
func ticking(t *testing.T, file, when string) {
	t.Helper()
	before := sizeOf(file)
	eventually(t, 10*time.Second, "the command to keep running "+when, func() bool { return sizeOf(file) > before })
	assert.NoFileExists(t, file+".signalled", "the command was signalled "+when)
}

// stopRequestPath is the file crew stop asks a run's supervisor through.
func (e *sharedEnv) stopRequestPath(id string) string {
	return filepath.Join(e.root, "owners", id+".stop")
}

func (e *sharedEnv) eventsOf(id string) string {
	e.t.Helper()
	r := e.run("status", "--json", id)
	require.Equal(e.t, 0, r.Code, r.Stderr)
	var v struct {
		Events []struct {
			What string `json:"what"`
		} `json:"events"`
	}
	require.NoError(e.t, json.Unmarshal([]byte(r.Stdout), &v), r.Stdout)
	var b strings.Builder
	for _, ev := range v.Events {
		b.WriteString(ev.What + "\n")
	}
	return b.String()
}

func refusedRun(task, id string) string {
	return "crew: " + task + ": run " + id + " belongs to root (uid 0): only its own user or root may stop it, and crew stop runs as "
}

// A member cannot stop root's run: not with SIGKILL through its
// supervisor, not while the supervisor is stopped, not once it is an
// orphan. Each time crew stop exits 77 at once, names whose run it is,
// writes no request and signals nothing; the command keeps running. Root
// can stop it.
func TestMemberCannotStopAnotherUsersRun(t *testing.T) {
	e := newSharedEnv(t, 2)
	ticks := filepath.Join(e.dir, "ticks")
	holder := e.start(nil, append([]string{"start", "hold", "--"}, ticker(ticks)...)...)
	id := e.activeRun("hold").RunID
	ticking(t, ticks, "once started")

	refused := func(when string, args ...string) {
		t.Helper()
		r := e.runAsMember(append([]string{"stop"}, args...)...)
		assert.Equal(t, 77, r.Code, "%s: %s", when, r.Stderr)
		assert.Contains(t, r.Stderr, refusedRun("hold", id), when)
		assert.Contains(t, r.Stderr, "(uid 65534); nothing was signalled\n", when)
		assert.NoFileExists(t, e.stopRequestPath(id), "%s: crew stop wrote a request", when)
		ticking(t, ticks, "after the refusal "+when)
		assert.Equal(t, "running", e.runRecord(id).State, when)
	}
	refused("(supervised)", "--signal", "KILL", "--grace", "1s", "hold")
	refused("(by run id)", id)

	// Its supervisor stopped: crew stop would signal the command itself.
	require.NoError(t, holder.cmd.Process.Signal(syscall.SIGSTOP))
	refused("(supervisor stopped)", "--grace", "1s", "hold")
	require.NoError(t, holder.cmd.Process.Signal(syscall.SIGCONT))

	if runtime.GOOS != "linux" {
		return // an orphan is stopped through /proc and pidfds
	}
	// An orphan: its supervisor killed, its command holds the slot.
	require.NoError(t, holder.cmd.Process.Kill())
	holder.wait(t, 10*time.Second)
	eventually(t, 10*time.Second, "the run to be an orphan", func() bool { return e.runRecord(id).Orphaned })
	refused("(orphan)", "--signal", "KILL", "--grace", "1s", "hold")

	r := e.run("stop", "--grace", "5s", "hold")
	require.Equal(t, 0, r.Code, "root stops it: %s", r.Stderr)
	rec := e.runRecord(id)
	assert.Equal(t, "stopped", rec.State)
	assert.FileExists(t, ticks+".signalled", "the command got root's SIGTERM: %s", rec.Reason)
}

// Root may stop a member's run, and the member its own; the record says
// who stopped it.
func TestRootAndTheRunsOwnUserMayStopIt(t *testing.T) {
	e := newSharedEnv(t, 2)
	for _, c := range []struct {
		task, by string
		stop     func(args ...string) result
	}{
		{"by-root", "root", func(args ...string) result { return e.run(args...) }},
		{"by-member", "", e.runAsMember},
	} {
		ticks := filepath.Join(e.dir, c.task)
		p := e.startAsMember(append([]string{"start", c.task, "--"}, ticker(ticks)...)...)
		id := e.activeRun(c.task).RunID
		ticking(t, ticks, "once started")
		r := c.stop("stop", "--grace", "5s", c.task)
		require.Equal(t, 0, r.Code, "%s: %s", c.task, r.Stderr)
		assert.Equal(t, 143, p.wait(t, 10*time.Second).Code, "the member's crew start ends with its command")
		assert.FileExists(t, ticks+".signalled")
		rec := e.runRecord(id)
		assert.Equal(t, "stopped", rec.State)
		assert.Contains(t, rec.Reason, "stopped by crew stop (pid ")
		if c.by != "" {
			assert.Contains(t, rec.Reason, "user "+c.by+"), which sent SIGTERM")
		}
	}
}

// A stop request a member writes by hand for root's run, claiming to be
// root's, is not carried out: root's supervisor takes who wrote it from
// the file's owner, refuses it, tells its terminal and notes it in the
// run's events; the command keeps running.
func TestHandWrittenStopRequestOfAMemberIsIgnored(t *testing.T) {
	e := newSharedEnv(t, 2)
	ticks := filepath.Join(e.dir, "ticks")
	holder := e.start(nil, append([]string{"start", "hold", "--"}, ticker(ticks)...)...)
	id := e.activeRun("hold").RunID
	ticking(t, ticks, "once started")

	req := fmt.Sprintf(`{"pid": 1, "user": "root", "signal": "SIGKILL", "signo": 9, "at": %q, "grace": "1s"}`, time.Now().UTC().Format(time.RFC3339Nano))
	owners := filepath.Join(e.root, "owners")
	write := exec.Command("sh", "-c", `printf '%s' "$1" > "$2/.by-hand" && mv "$2/.by-hand" "$2/$3.stop"`, "write", req, owners, id)
	write.SysProcAttr = e.asMember().SysProcAttr
	out, err := write.CombinedOutput()
	require.NoError(t, err, "the member writes the request: %s", out)
	fi, err := os.Stat(e.stopRequestPath(id))
	require.NoError(t, err)
	require.Equal(t, uint32(member), fi.Sys().(*syscall.Stat_t).Uid, "the request file is the member's")

	note := "refused a stop request (SIGKILL) written by "
	eventually(t, 10*time.Second, "the supervisor to note the refused request", func() bool {
		return strings.Contains(e.eventsOf(id), note)
	})
	assert.Contains(t, e.eventsOf(id), "(uid 65534): run "+id+" belongs to root (uid 0), and only its own user or root may stop it; nothing was signalled")
	ticking(t, ticks, "after the refused request")
	assert.Equal(t, "running", e.runRecord(id).State)
	assert.Contains(t, holder.errb.String(), note, "crew start tells its terminal")

	r := e.run("stop", "--grace", "5s", id)
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, 143, holder.wait(t, 10*time.Second).Code)
	assert.FileExists(t, ticks+".signalled")
}

// A member cannot take root's waiting start out of the queue: exit 77,
// nothing changed, and it is admitted in its turn. Root can take the
// member's out.
func TestMemberCannotRemoveAnotherUsersTicket(t *testing.T) {
	e := newSharedEnv(t, 1)
	release, holder := e.holdSlot("holder")
	rootWaiter := e.start(nil, "start", "--wait", "root-waits", "--", "true")
	e.waitQueued("root-waits")
	memberWaiter := e.startAsMember("start", "--wait", "member-waits", "--", "true")
	e.waitQueued("member-waits")
	var id string
	for _, q := range e.queue().Queue {
		if q.Task == "root-waits" {
			id = q.RunID
		}
	}

	for _, arg := range []string{"root-waits", id} {
		r := e.runAsMember("stop", arg)
		assert.Equal(t, 77, r.Code, r.Stderr)
		assert.Contains(t, r.Stderr, "crew: root-waits: the waiting start "+id+" belongs to root (uid 0): only its own user or root may take it out of the queue, and crew stop runs as ")
		assert.Contains(t, r.Stderr, "(uid 65534); nothing was changed\n")
		assert.NoFileExists(t, e.stopRequestPath(id), "crew stop wrote a request")
	}
	q := e.queue().Queue
	require.Len(t, q, 2, "both still wait")
	assert.Equal(t, "root-waits", q[0].Task, "first in line still")

	r := e.run("stop", "member-waits")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "to leave the queue")
	assert.Equal(t, 143, memberWaiter.wait(t, 10*time.Second).Code)

	release()
	holder.wait(t, 10*time.Second)
	assert.Equal(t, 0, rootWaiter.wait(t, 10*time.Second).Code, "root's waiting start was admitted in its turn")
}
