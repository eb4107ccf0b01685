package e2e

// The hostile state root (issue 10, "Done when"): every directory of a
// state root filled with FIFOs, links (symbolic and hard) to canaries
// outside the root, to /dev/zero and to nowhere, device nodes, huge and
// empty files, and directories where files belong. Every command must
// answer within a bound, never write, read, move or create anything
// outside the root, never signal a process outside it, and never
// over-admit.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// secretMark is in every canary file; no crew output may ever contain it.
const secretMark = "QXZ"

// plantKind is one kind of hostile entry.
type plantKind struct {
	name  string
	plant func(t *testing.T, h *hostile, path string)
}

// hostile is a hostile state root in the making.
type hostile struct {
	e       *env
	c       *canaries
	canary  *exec.Cmd // a process outside the root whose pid records name
	kinds   []plantKind
	counter int
}

// hostileKinds are the kinds of entry planted everywhere. Device nodes
// need root.
func hostileKinds() []plantKind {
	kinds := []plantKind{
		{"fifo", func(t *testing.T, _ *hostile, p string) { mkfifoAt(t, p) }},
		{"link-to-canary-file", func(t *testing.T, h *hostile, p string) { symlinkAt(t, h.c.file("secret"), p) }},
		{"link-to-canary-dir", func(t *testing.T, h *hostile, p string) { symlinkAt(t, h.c.dir, p) }},
		{"link-to-dev-zero", func(t *testing.T, _ *hostile, p string) { symlinkAt(t, "/dev/zero", p) }},
		{"dangling-link", func(t *testing.T, h *hostile, p string) { symlinkAt(t, h.c.file("missing-"+filepath.Base(p)), p) }},
		{"hard-link-to-canary", func(t *testing.T, h *hostile, p string) { hardlinkAt(t, h.c.file("hard"), p) }},
		{"huge-sparse", func(t *testing.T, _ *hostile, p string) { sparseAt(t, p, 200<<20) }},
		{"empty", func(t *testing.T, _ *hostile, p string) { sparseAt(t, p, 0) }},
		{"directory", func(t *testing.T, _ *hostile, p string) {
			require.NoError(t, os.MkdirAll(filepath.Join(p, "inside"), 0o700))
		}},
	}
	if os.Geteuid() == 0 {
		kinds = append(kinds, plantKind{"char-device", func(t *testing.T, _ *hostile, p string) {
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
			// /dev/zero's numbers; removed with the test's temporary directory.
			require.NoError(t, syscall.Mknod(p, syscall.S_IFCHR|0o600, int(unix.Mkdev(1, 5))))
		}})
	}
	return kinds
}

func newHostile(t *testing.T) *hostile {
	e := newEnv(t)
	e.initMax(2)
	h := &hostile{e: e, kinds: hostileKinds()}
	h.c = newCanaries(t, filepath.Dir(e.root), map[string]string{
		"secret": secretMark + "-secret-canary\n",
		"hard":   secretMark + "-hard-linked-canary\n",
		"other":  "another file in the canary directory\n",
	})
	// The canary process: its own process group, ours to reap.
	h.canary = exec.Command("sleep", "600")
	h.canary.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, h.canary.Start())
	t.Cleanup(func() { _ = killChildGroup(h.canary, syscall.SIGKILL); _ = h.canary.Wait() })
	return h
}

// id makes a fresh planted run id in shard plantedShard.
func (h *hostile) id() string {
	h.counter++
	return fmt.Sprintf("r-20260101T000000.000000000Z-%016x", 0xbad0000+h.counter)
}

func (h *hostile) path(rel ...string) string {
	return filepath.Join(append([]string{h.e.root}, rel...)...)
}

// record is a valid record of a run in state, naming the canary process.
func (h *hostile) record(id, task, state string) []byte {
	pid := h.canary.Process.Pid
	m := map[string]any{
		"version": 1, "runId": id, "task": task, "state": state, "command": []string{"sleep", "600"},
		"host": "planted", "createdAt": "2026-01-01T00:00:00Z", "startedAt": "2026-01-01T00:00:01Z",
		"supervisorPid": pid, "taskPid": pid, "pgid": pid,
	}
	if state != "running" {
		m["finishedAt"], m["exitCode"] = "2026-01-01T00:00:02Z", 0
	}
	b, err := json.Marshal(m)
	require.NoError(h.e.t, err)
	return b
}

func (h *hostile) write(rel string, data []byte) {
	require.NoError(h.e.t, os.MkdirAll(filepath.Dir(h.path(rel)), 0o700))
	require.NoError(h.e.t, os.WriteFile(h.path(rel), data, 0o600))
}

// planted are the ids of the hostile root, by what they exercise.
type planted struct {
	active, done, owners, queue, logs []string
}

// fill plants every kind in every directory of the layout, under names
// crew reads and writes, and returns the ids involved.
func (h *hostile) fill() planted {
	t := h.e.t
	var p planted
	done := filepath.Join("runs", "done", plantedShard)
	for _, k := range h.kinds {
		// Records (under both names a record has: <id>.run, which crew
		// writes, and <id>.json, which older crews wrote), finished
		// records and a ticket that are the kind.
		var id string
		for _, ext := range []string{".json", ".run"} {
			id = h.id()
			p.active = append(p.active, id)
			k.plant(t, h, h.path("runs", "active", id+ext))
			id = h.id()
			p.done = append(p.done, id)
			k.plant(t, h, h.path(done, id+ext))
		}
		// A slot file whose record is another run's: moved here from that
		// run's name, it is not this run's record.
		id = h.id()
		p.active = append(p.active, id)
		h.write(filepath.Join("runs", "active", id+".run"), recordFile(".run", h.record(h.id(), "moved-"+k.name, "running")))
		id = h.id()
		p.queue = append(p.queue, id)
		for _, suffix := range []string{".json", ".lock", ".bell"} {
			k.plant(t, h, h.path("queue", id+suffix))
		}
		// A valid running record whose lock files and stop request are
		// the kind: liveness is probed through them.
		id = h.id()
		p.owners = append(p.owners, id)
		h.write(filepath.Join("runs", "active", id+".run"), recordFile(".run", h.record(id, "owners-"+k.name, "running")))
		for _, suffix := range []string{".lock", ".supervisor.lock", ".stop"} {
			k.plant(t, h, h.path("owners", id+suffix))
		}
		// A finished run whose log is the kind.
		id = h.id()
		p.logs = append(p.logs, id)
		h.write(filepath.Join(done, id+".json"), h.record(id, "logs-"+k.name, "succeeded"))
		k.plant(t, h, h.path("logs", id+".log"))
		// Names crew picks in quarantine/ (a run quarantined above moves
		// next to them), junk in .locks/ and in the root, and
		// temporary-looking names recover sweeps.
		k.plant(t, h, h.path("quarantine", p.active[len(p.active)-3]+".json"))
		k.plant(t, h, h.path("quarantine", p.active[len(p.active)-3]+".json.why"))
		k.plant(t, h, h.path("quarantine", p.active[len(p.active)-2]+".run"))
		k.plant(t, h, h.path("quarantine", p.active[len(p.active)-2]+".run.why"))
		k.plant(t, h, h.path(".locks", "junk-"+k.name))
		k.plant(t, h, h.path("junk-"+k.name))
		k.plant(t, h, h.path("runs", "active", "."+id+".json0123456789abcdef"))
		k.plant(t, h, h.path("runs", "active", "."+id+".run0123456789abcdef"))
		k.plant(t, h, h.path(".crew.json"+k.name))
	}
	// The files crew writes in place, and a shard that is not a directory.
	require.NoError(t, os.Remove(h.path(".locks", "dispatch-admission.holder")))
	symlinkAt(t, h.c.file("secret"), h.path(".locks", "dispatch-admission.holder"))
	hardlinkAt(t, h.c.file("hard"), h.path("refusals.log"))
	symlinkAt(t, h.c.dir, h.path("runs", "done", "2025-01-01T00"))
	mkfifoAt(t, h.path("runs", "done", "2025-01-01T01"))
	// Planting changed the canaries' link counts and the canary
	// directory's contents (dangling links point into it): that is the
	// baseline.
	h.c.before = h.c.snapshot()
	return p
}

// crew runs crew within the bound and checks that nothing of a canary
// leaked into what it printed.
func (h *hostile) crew(args ...string) result {
	h.e.t.Helper()
	r := h.e.bounded(hangLimit, nil, args...)
	assert.NotContains(h.e.t, r.Stdout+r.Stderr, secretMark, "crew %v printed a canary's content", args)
	return r
}

// assertCanaryAlive fails if the canary process was signalled to death.
func (h *hostile) assertCanaryAlive(when string) {
	t := h.e.t
	t.Helper()
	st, err := readStat(h.canary.Process.Pid)
	if err != nil || st.state == 'Z' {
		t.Errorf("%s: the canary process (pid %d), named by planted records, is dead: %v", when, h.canary.Process.Pid, err)
	}
}

func TestHostileStateRoot(t *testing.T) {
	if !procfsProofs {
		t.Skip("the canary process is checked through /proc")
	}
	h := newHostile(t)
	e := h.e
	p := h.fill()

	// Every command, on every planted thing, before anything ran.
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"recover", "--dry-run"}, {"prune", "--keep", "1", "--dry-run"}} {
		h.crew(args...)
	}
	for _, id := range append(append(append([]string{}, p.active...), p.done...), p.queue...) {
		h.crew("status", id)
		h.crew("wait", "--timeout", "300ms", id)
		h.crew("logs", id)
		h.crew("stop", "--grace", "1s", id)
	}
	for i, id := range p.logs {
		h.crew("status", id)
		h.crew("wait", "--timeout", "300ms", id)
		switch h.kinds[i].name {
		case "huge-sparse", "empty":
			// Regular files with one link are logs like any other: a log is
			// streamed as it is (200 MB of zeros are its content).
		default:
			r := h.crew("logs", id)
			assert.NotEqual(t, 0, r.Code, "crew logs printed a planted %s", h.kinds[i].name)
			assert.Contains(t, r.Stderr, id+".log", "crew logs names the log it refuses")
			h.crew("logs", "-f", "logs-"+h.kinds[i].name)
		}
	}
	for _, id := range p.owners {
		h.crew("status", id)
		h.crew("wait", "--timeout", "300ms", id)
	}
	h.c.assertUnchanged("after the first pass")
	h.assertCanaryAlive("after the first pass")

	// Admission in the hostile root: records whose liveness cannot be
	// told hold their slots (fail closed); the cap leaves two real slots.
	s := e.status()
	held := s.SlotsInUse
	r := h.crew("init", "--max", fmt.Sprint(held+2))
	require.Equal(t, 0, r.Code, r.Stderr)
	observer := filepath.Join(e.dir, "observer")
	starts := [][]string{
		{"start", "fg-1"}, {"start", "fg-2"}, {"start", "--wait=60s", "wait-1"}, {"start", "--wait=60s", "wait-2"},
		{"start", "--detach", "detach-1"}, {"start", "--detach", "--wait=60s", "detach-2"},
	}
	var wg sync.WaitGroup
	results := make([]result, len(starts))
	errs := make([]error, len(starts))
	for i, args := range starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := e.tryStart(nil, append(args, append([]string{"--"}, observerCmd(observer, "0.3")...)...)...)
			if err != nil {
				errs[i] = err
				return
			}
			results[i], errs[i] = p.tryWait(hangLimit)
		}()
	}
	wg.Wait()
	var detached []string
	for i, res := range results {
		require.NoError(t, errs[i], starts[i])
		assert.NotContains(t, res.Stdout+res.Stderr, secretMark)
		assert.Contains(t, []int{0, 75}, res.Code, "%v: %s", starts[i], res.Stderr)
		if strings.Contains(starts[i][1], "detach") && res.Code == 0 {
			id := strings.TrimSpace(res.Stdout)
			detached = append(detached, id)
			e.killDetachedAtCleanup(id)
		}
	}
	for _, id := range detached {
		h.crew("wait", id)
		h.crew("logs", id)
	}
	maxSeen, started := maxConcurrency(t, observer)
	assert.LessOrEqual(t, maxSeen, 2, "more commands ran at once than the free slots")
	assert.GreaterOrEqual(t, started, 2, "the hostile root admitted nothing: the test proves little")
	s = e.status()
	assert.Equal(t, held, s.SlotsInUse, "every real run ended and gave its slot back")

	// The repair pass and everything after it.
	for _, args := range [][]string{{"recover"}, {"recover", "--dry-run"}, {"status"}, {"status", "--json"},
		{"status", "fg-1"}, {"logs", "fg-1"}, {"wait", "fg-1"}, {"start", "after", "--", "true"},
		{"start", "--wait=10s", "after-wait", "--", "true"}, {"stop", "after"}, {"prune", "--keep", "1"}, {"init"}} {
		h.crew(args...)
	}
	h.c.assertUnchanged("after every command")
	h.assertCanaryAlive("after every command")
	// Planted things crew moved aside stay inside the root.
	entries, err := os.ReadDir(h.path("quarantine"))
	require.NoError(t, err)
	assert.NotEmpty(t, entries)
}

// crew.json itself, in each hostile form: every command answers and
// nothing leaks (issue 11's resilience is the outcomes work; here only
// bounds and containment are asserted).
func TestHostileConfig(t *testing.T) {
	for _, k := range hostileKinds() {
		t.Run(k.name, func(t *testing.T) {
			h := newHostile(t)
			require.NoError(t, os.Remove(h.path("crew.json")))
			k.plant(t, h, h.path("crew.json"))
			h.c.before = h.c.snapshot()
			for _, args := range everyCommand("x") {
				r := h.crew(args...)
				if args[0] == "start" && k.name != "empty" {
					assert.NotEqual(t, 0, r.Code, "%v started with a %s for crew.json", args, k.name)
				}
				if args[0] == "start" && r.Code == 0 && strings.Contains(args[1], "detach") {
					id := strings.TrimSpace(r.Stdout)
					h.e.killDetachedAtCleanup(id)
					h.crew("wait", id)
				}
			}
			h.c.assertUnchanged("after every command")
			h.assertCanaryAlive("after every command")
		})
	}
}

// Signals: records and tickets that name a process outside the root (the
// canary), pgid 0 and pgid 1, with their locks held by a living process
// (the test's), must make crew stop signal nobody outside the run.
//
// Should crew regress and call kill(-1), as root that signals every process
// on the machine: the test runs itself in a pid namespace of its own where
// it can (unshare(1)), so such a regression fails the test and nothing else.
// Where it cannot, it leaves out the records that name pgid 1 and -1.
func TestHostileRecordsSignalNobody(t *testing.T) {
	if !procfsProofs {
		t.Skip("the canary process is checked through /proc")
	}
	if inOwnPIDNamespace(t, "^TestHostileRecordsSignalNobody$") {
		return // ran (and passed or failed) in the namespace
	}
	pgids := []int{0, 1, -1, os.Getpid()}
	if os.Getenv(pidNSEnv) == "" {
		t.Log("no pid namespace of its own: leaving out the records that name pgid 1 and -1")
		pgids = []int{0, os.Getpid()}
	}
	h := newHostile(t)
	e := h.e
	pid := h.canary.Process.Pid
	holders := []*exec.Cmd{}
	hold := func(lock string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(lock), 0o700))
		require.NoError(t, os.WriteFile(lock, nil, 0o600))
		c := exec.Command("flock", lock, "sleep", "600")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, c.Start())
		holders = append(holders, c)
		t.Cleanup(func() { _ = killChildGroup(c, syscall.SIGKILL); _ = c.Wait() })
	}
	var ids []string
	for _, pgid := range append([]int{pid}, pgids...) {
		id := h.id()
		rec := map[string]any{}
		require.NoError(t, json.Unmarshal(h.record(id, "victim", "running"), &rec))
		rec["pgid"], rec["taskPid"], rec["supervisorPid"] = pgid, pgid, pgid
		b, _ := json.Marshal(rec)
		h.write(filepath.Join("runs", "active", id+".json"), b)
		hold(h.path("owners", id+".lock"))
		ids = append(ids, id)
	}
	// A ticket whose pid is the canary, its lock held.
	tid := h.id()
	ticket, _ := json.Marshal(map[string]any{"version": 1, "runId": tid, "task": "victim-ticket", "command": []string{"true"},
		"host": "planted", "pid": pid, "createdAt": "2026-01-01T00:00:00Z"})
	h.write(filepath.Join("queue", tid+".json"), ticket)
	hold(h.path("queue", tid+".lock"))
	ids = append(ids, tid)
	eventually(t, 10*time.Second, "the planted locks to be held", func() bool { return e.status().SlotsInUse >= 5 })
	for _, id := range ids {
		h.crew("stop", "--grace", "1s", id)
		h.crew("recover")
	}
	h.assertCanaryAlive("after crew stop of records naming it")
}

// pidNSEnv marks a test binary re-run inside a pid namespace of its own.
const pidNSEnv = "CREW_E2E_IN_PIDNS"

// inOwnPIDNamespace re-runs the test binary for the tests that match run
// inside a new pid and mount namespace (unshare -pf --mount-proc), and
// reports whether it did (the outcome is then this test's). It reports
// false when the test already runs in one, or when unshare is not
// permitted here.
func inOwnPIDNamespace(t *testing.T, run string) bool {
	t.Helper()
	if os.Getenv(pidNSEnv) != "" {
		return false
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return false
	}
	if exec.Command(unshare, "-pf", "--mount-proc", "true").Run() != nil {
		return false
	}
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(unshare, "-pf", "--mount-proc", "--kill-child", self, "-test.run", run, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), pidNSEnv+"=1", "CREW_E2E_BIN="+crewBin)
	out, err := cmd.CombinedOutput()
	t.Logf("in a pid namespace of its own:\n%s", out)
	require.NoError(t, err, "the test failed in its pid namespace")
	return true
}
