package e2e

// Who may write the state root: crew refuses one that another user owns
// or that group or others can write, unless it was shared with a group on
// purpose (crew init --group).

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// everyCommand is one call of each crew command (and the start modes).
func everyCommand(arg string) [][]string {
	return [][]string{
		{"start", "x", "--", "true"}, {"start", "--wait=1s", "x", "--", "true"}, {"start", "--detach", "x", "--", "true"},
		{"status"}, {"status", "--json"}, {"status", arg}, {"recover"}, {"recover", "--dry-run"},
		{"wait", "--timeout", "1s", arg}, {"logs", arg}, {"stop", "--grace", "1s", arg}, {"prune", "--keep", "1"},
		{"init"}, {"init", "--max", "3"},
	}
}

func TestUnsafeStateRootIsRefused(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, e *env) (path string)
		want  []string
	}{
		{"root writable by everyone", func(t *testing.T, e *env) string {
			require.NoError(t, os.Chmod(e.root, 0o777))
			return e.root
		}, []string{"is writable by every user (mode drwxrwxrwx, owner ", "Fix: chmod go-w "}},
		{"root writable by its group", func(t *testing.T, e *env) string {
			require.NoError(t, os.Chmod(e.root, 0o770))
			return e.root
		}, []string{"is writable by its group (mode drwxrwx---, owner ", "or share the state root with that group on purpose: crew init --group "}},
		{"logs writable by everyone", func(t *testing.T, e *env) string {
			logs := filepath.Join(e.root, "logs")
			require.NoError(t, os.Chmod(logs, 0o733))
			return logs
		}, []string{"is writable by every user (mode drwx-wx-wx, owner ", "Fix: chmod go-w "}},
		{"owned by another user", func(t *testing.T, e *env) string {
			if os.Geteuid() != 0 {
				t.Skip("only root can give the state root to another user")
			}
			require.NoError(t, os.Chown(e.root, 65534, -1))
			return e.root
		}, []string{"is not owned by root (uid 0), who runs crew (mode drwx------, owner ", "(uid 65534)", "Fix: use a state root of your own (--root DIR or CREW_ROOT), or, if this one is yours, chown -R root "}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			id, _ := e.runToEnd("x", "true")
			path := c.setup(t, e)
			for _, args := range everyCommand(id) {
				r := e.bounded(hangLimit, nil, args...)
				assert.Equal(t, 125, r.Code, "%v: %s", args, r.Stderr)
				assert.Contains(t, r.Stderr, "crew: refusing the state root "+e.root+": "+path+" ", args)
				for _, w := range c.want {
					assert.Contains(t, r.Stderr, w, args)
				}
				assert.Contains(t, r.Stderr, "whoever can write a state root can make crew act on files planted there", args)
				assert.Empty(t, r.Stdout, args)
			}
			active, _ := os.ReadDir(filepath.Join(e.root, "runs", "active"))
			assert.Empty(t, active, "nothing ran in a refused root")
		})
	}

	// The suggested fix for a root made group-writable by hand works.
	e := newEnv(t)
	e.initMax(1)
	require.NoError(t, os.Chmod(e.root, 0o770))
	g, err := user.LookupGroupId(strconv.Itoa(os.Getegid()))
	require.NoError(t, err)
	r := e.run("init", "--group", g.Name)
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: "+e.root+": shared with group "+g.Name+" (directories 2770, files 0660;")
	fi, err := os.Stat(e.root)
	require.NoError(t, err)
	assert.Equal(t, os.ModeSetgid|os.ModeDir|0o770, fi.Mode())
	assert.Equal(t, 0, e.run("start", "x", "--", "true").Code)

	// Init's own usage errors.
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"init", "--group", "no-such-group-for-crew"}, `crew: --group: group "no-such-group-for-crew" does not exist on this machine`},
		{[]string{"init", "--group", g.Name, "--no-group"}, "crew: --group and --no-group do not go together"},
	} {
		r := e.run(c.args...)
		assert.Equal(t, 64, r.Code, "%v: %s", c.args, r.Stderr)
		assert.Contains(t, r.Stderr, c.stderr)
	}
}

// testUsers are users and a group made for one test, removed after it.
type testUsers struct {
	t     *testing.T
	group string
	gid   int
}

// newTestUsers makes a group, or skips the test where that is not
// possible (not root, no useradd).
func newTestUsers(t *testing.T) *testUsers {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making users and a group needs root: the mode rules are tested as one user in internal/runstore")
	}
	for _, tool := range []string{"groupadd", "groupdel", "useradd", "userdel", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on this machine: %v", tool, err)
		}
	}
	u := &testUsers{t: t, group: fmt.Sprintf("crewg%d", os.Getpid()%100000)}
	u.sh("groupadd", u.group)
	t.Cleanup(func() { u.cleanup("groupdel", u.group) })
	g, err := user.LookupGroup(u.group)
	require.NoError(t, err)
	u.gid, _ = strconv.Atoi(g.Gid)
	return u
}

func (u *testUsers) sh(args ...string) {
	u.t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	require.NoError(u.t, err, "%v: %s", args, out)
}

func (u *testUsers) cleanup(args ...string) {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		u.t.Errorf("clean-up %v: %v: %s", args, err, out)
	}
}

// add makes a user, in the group or not; it is removed after the test.
func (u *testUsers) add(name string, member bool) string {
	u.t.Helper()
	name = fmt.Sprintf("%s%d", name, os.Getpid()%100000)
	args := []string{"useradd", "-M", "-N", "-s", "/bin/sh"}
	if member {
		args = append(args, "-G", u.group)
	}
	u.sh(append(args, name)...)
	u.t.Cleanup(func() { u.cleanup("userdel", name) })
	return name
}

// asUser runs crew as user name (with its groups), in dir.
func (e *env) asUser(name, bin, dir string, args ...string) *exec.Cmd {
	e.t.Helper()
	usr, err := user.Lookup(name)
	require.NoError(e.t, err)
	cmd := exec.Command("setpriv", append([]string{"--reuid", usr.Uid, "--regid", usr.Gid, "--init-groups", "--", bin, "--root", e.root}, args...)...)
	cmd.Env = e.environ("HOME=" + dir)
	cmd.Dir = dir
	return cmd
}

func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// A state root shared with a group works for two users of the group (the
// same slots, each other's runs, logs and bells), not for a third user,
// and comes back private with crew init --no-group.
func TestSharedStateRootTwoUsers(t *testing.T) {
	u := newTestUsers(t)
	alice, bob, carol := u.add("crewa", true), u.add("crewb", true), u.add("crewc", false)

	// Everything the users run must be reachable by them: the binary and
	// the directory above the state root, outside the test's 0700 temp.
	base, err := os.MkdirTemp("", "crew-shared-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	bin := filepath.Join(base, "crew")
	copyFile(t, crewBin, bin, 0o755)
	home := filepath.Join(base, "home")
	require.NoError(t, os.Mkdir(home, 0o755))
	aliceUser, err := user.Lookup(alice)
	require.NoError(t, err)
	aliceUID, _ := strconv.Atoi(aliceUser.Uid)
	require.NoError(t, os.Chown(home, aliceUID, -1))
	e := newEnv(t)
	e.root = filepath.Join(home, "state")
	as := func(name string, args ...string) result {
		t.Helper()
		return runCmd(t, e.asUser(name, bin, base, args...))
	}

	r := as(alice, "init", "--max", "1", "--group", u.group)
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "shared with group "+u.group)
	fi, err := os.Stat(e.root)
	require.NoError(t, err)
	assert.Equal(t, os.ModeDir|os.ModeSetgid|0o770, fi.Mode())
	assert.Equal(t, uint32(u.gid), fi.Sys().(*syscall.Stat_t).Gid)

	// Each user runs; each sees, reads and waits for the other's runs.
	r = as(bob, "start", "from-bob", "--", "echo", "bob was here")
	require.Equal(t, 0, r.Code, r.Stderr)
	r = as(alice, "start", "from-alice", "--", "echo", "alice was here")
	require.Equal(t, 0, r.Code, r.Stderr)
	r = as(alice, "logs", "from-bob")
	assert.Equal(t, "bob was here\n", r.Stdout, r.Stderr)
	r = as(bob, "logs", "from-alice")
	assert.Equal(t, "alice was here\n", r.Stdout, r.Stderr)
	assert.Equal(t, 0, as(bob, "wait", "from-alice").Code)
	r = as(bob, "status", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stdout, `"task": "from-alice"`)
	assert.Contains(t, r.Stdout, `"task": "from-bob"`)

	// One cap for both: while alice's run holds the only slot, bob is
	// refused; bob's waiting start is rung by alice's supervisor (bob's
	// bell is the group's to write) and runs once her run ends.
	gate := filepath.Join(base, "gate")
	holder := e.asUser(alice, bin, base, append([]string{"start", "holder", "--"}, waitCmd(gate)...)...)
	var holderErr bytes.Buffer
	holder.Stdout, holder.Stderr = io.Discard, &holderErr
	require.NoError(t, holder.Start())
	t.Cleanup(func() {
		_ = os.WriteFile(gate, nil, 0o644)
		_ = holder.Wait()
	})
	eventually(t, 10*time.Second, "alice's run to hold the slot", func() bool {
		return strings.Contains(as(bob, "status").Stdout, "holder")
	})
	r = as(bob, "start", "refused", "--", "true")
	assert.Equal(t, 75, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "not admitted: all slots are busy (1/1 in use)")
	waiter := e.asUser(bob, bin, base, "start", "--wait=60s", "waiter", "--", "echo", "bob waited")
	var waitOut, waitErr bytes.Buffer
	waiter.Stdout, waiter.Stderr = &waitOut, &waitErr
	require.NoError(t, waiter.Start())
	eventually(t, 10*time.Second, "bob's start to wait in line", func() bool {
		return strings.Contains(as(alice, "status").Stdout, "waiter")
	})
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	require.NoError(t, holder.Wait(), holderErr.String())
	done := make(chan error, 1)
	go func() { done <- waiter.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, waitErr.String())
	case <-time.After(hangLimit):
		t.Fatalf("bob's waiting start was never admitted: %s", waitErr.String())
	}
	assert.Equal(t, "bob waited\n", waitOut.String())

	// Someone outside the group cannot use it at all.
	r = as(carol, "status")
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "permission denied")
	r = as(carol, "init", "--group", u.group)
	assert.Equal(t, 64, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: --group "+u.group+": you are not a member of group "+u.group+", and only its members (or root) can give it a directory")

	// Private again: alice cannot take back the shard directory bob made,
	// and says so; root can, and gives everything to alice.
	r = as(alice, "init", "--no-group")
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "cannot make the state root "+e.root+" private: ")
	assert.Contains(t, r.Stderr, "(owner "+bob+" (uid ")
	r = e.run("--root", e.root, "init", "--no-group")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "crew: "+e.root+": private (directories 0700, files 0600;")
	r = as(alice, "status")
	assert.Equal(t, 0, r.Code, r.Stderr)
	r = as(bob, "status")
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.NotContains(t, readFile(t, filepath.Join(e.root, "crew.json")), "group")
	// As root, on alice's private root: refused (it is not root's).
	r = e.run("--root", e.root, "status")
	assert.Equal(t, 125, r.Code, r.Stderr)
	assert.Contains(t, r.Stderr, "is not owned by root (uid 0), who runs crew")
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, mode))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
