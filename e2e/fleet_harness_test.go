//go:build etcd

package e2e

// The fleet harness: crew processes standing in for separate hosts
// (CREW_HOST=h1, h2, h3) on one store, local or etcd, and an independent
// observer of the commands they run.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fleet is one test's store and the crew processes it runs.
type fleet struct {
	t     *testing.T
	bin   string
	kind  string // "etcd" or "local"
	store string // the store URL (etcd) or the state root (local)
	dir   string // scratch: observer FIFOs, gates
	obs   *observer
}

var prefixUnsafe = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// newEtcdFleet is a store of its own (a per-test prefix) on cluster c.
func newEtcdFleet(t *testing.T, c *etcdCluster) *fleet {
	t.Helper()
	prefix := prefixUnsafe.ReplaceAllString(strings.TrimPrefix(t.Name(), "TestFleet/"), "-")
	return newFleet(t, "etcd", c.storeURL("crew-e2e-"+prefix))
}

// newLocalFleet is a local state root.
func newLocalFleet(t *testing.T) *fleet {
	t.Helper()
	return newFleet(t, "local", filepath.Join(t.TempDir(), "state"))
}

func newFleet(t *testing.T, kind, store string) *fleet {
	t.Helper()
	f := &fleet{t: t, bin: crewEtcdBin(t), kind: kind, store: store, dir: t.TempDir()}
	f.obs = newObserver(t, f.dir)
	return f
}

// storeEnv is the environment entry that points crew at the store.
func (f *fleet) storeEnv() string {
	if f.kind == "etcd" {
		return "CREW_STORE=" + f.store
	}
	return "CREW_ROOT=" + f.store
}

// environ is the test's environment minus anything that could point crew
// elsewhere, plus the store, the host's name and extra (later entries win).
func (f *fleet) environ(host string, extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CREW_") {
			out = append(out, kv)
		}
	}
	out = append(out, "GORACE=atexit_sleep_ms=0 halt_on_error=1", f.storeEnv())
	if host != "" {
		out = append(out, "CREW_HOST="+host)
	}
	return append(out, extra...)
}

func (f *fleet) command(host string, extraEnv []string, args ...string) *exec.Cmd {
	cmd := exec.Command(f.bin, args...)
	cmd.Env = f.environ(host, extraEnv...)
	cmd.Dir = f.dir
	return cmd
}

// spawn starts crew on host in the background; the test's cleanup kills
// it (our own child) if it still runs. Any goroutine may call it.
func (f *fleet) spawn(host string, extraEnv []string, args ...string) (*proc, error) {
	return startProc(f.t, f.command(host, extraEnv, args...), args)
}

// start is spawn from the test's goroutine.
func (f *fleet) start(host string, extraEnv []string, args ...string) *proc {
	f.t.Helper()
	p, err := f.spawn(host, extraEnv, args...)
	require.NoError(f.t, err)
	return p
}

// tryRunFor runs crew to completion within limit (then kills it, our own
// child, and says so). Any goroutine may call it.
func (f *fleet) tryRunFor(limit time.Duration, host string, extraEnv []string, args ...string) (result, time.Duration, error) {
	begin := time.Now()
	p, err := f.spawn(host, extraEnv, args...)
	if err != nil {
		return result{}, 0, err
	}
	r, err := p.tryWait(limit)
	if err != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return r, time.Since(begin), err
}

// run runs crew on host to completion (within 60 s) from the test's
// goroutine.
func (f *fleet) run(host string, args ...string) result {
	f.t.Helper()
	r, _, err := f.tryRunFor(60*time.Second, host, nil, args...)
	require.NoError(f.t, err)
	return r
}

func (f *fleet) initMax(n int, pools ...string) {
	f.t.Helper()
	args := []string{"init", "--max", fmt.Sprint(n)}
	for _, p := range pools {
		args = append(args, "--pool", p)
	}
	r := f.run("", args...)
	require.Equal(f.t, 0, r.Code, "crew %v: %s", args, r.Stderr)
}

// fleetRun is a run as `crew status --json` shows it, with its host.
type fleetRun struct {
	runJSON
	Host     string            `json:"host"`
	Pool     string            `json:"pool"`
	Attempts []json.RawMessage `json:"attempts"`
}

type fleetStatus struct {
	Root              string     `json:"root"`
	MaximumInProgress int        `json:"maximumInProgress"`
	SlotsInUse        int        `json:"slotsInUse"`
	Active            []fleetRun `json:"active"`
	Finished          []fleetRun `json:"finished"`
	queueJSON                    // queue and pools, as the queue tests read them
}

func (f *fleet) status() fleetStatus {
	f.t.Helper()
	r := f.run("", "status", "--json")
	require.Equal(f.t, 0, r.Code, "crew status --json: %s", r.Stderr)
	var s fleetStatus
	require.NoError(f.t, json.Unmarshal([]byte(r.Stdout), &s), r.Stdout)
	return s
}

// record finds run id in the store, active or among the newest finished.
func (f *fleet) record(id string) (fleetRun, bool) {
	f.t.Helper()
	s := f.status()
	for _, r := range append(s.Active, s.Finished...) {
		if r.RunID == id {
			return r, true
		}
	}
	return fleetRun{}, false
}

// finalRecord waits until run id's record is final and returns it.
func (f *fleet) finalRecord(id string, timeout time.Duration) fleetRun {
	f.t.Helper()
	var rec fleetRun
	eventually(f.t, timeout, "run "+id+" to be finished", func() bool {
		r, ok := f.record(id)
		rec = r
		return ok && r.FinishedAt != nil && !slices.Contains([]string{"provisioning", "running"}, r.State)
	})
	return rec
}

func (f *fleet) recover(host string, args ...string) recoverJSON {
	f.t.Helper()
	r := f.run(host, append([]string{"recover", "--json"}, args...)...)
	require.Equal(f.t, 0, r.Code, "crew recover: %s", r.Stderr)
	var rep recoverJSON
	require.NoError(f.t, json.Unmarshal([]byte(r.Stdout), &rep), "stdout %q stderr %q", r.Stdout, r.Stderr)
	return rep
}

// gate is a file a command can wait for; every gate is opened when the
// test ends.
func (f *fleet) gate(name string) (path string, open func()) {
	path = filepath.Join(f.dir, "gate-"+name)
	f.t.Cleanup(func() { _ = os.WriteFile(path, nil, 0o600) })
	return path, func() { require.NoError(f.t, os.WriteFile(path, nil, 0o600)) }
}

// wantCode fails unless r exited with one of codes.
func wantCode(t *testing.T, r result, what string, codes ...int) {
	t.Helper()
	if !slices.Contains(codes, r.Code) {
		t.Fatalf("%s: exit %d, want %v\nstdout: %s\nstderr: %s", what, r.Code, codes, r.Stdout, r.Stderr)
	}
}

// shortErr is crew's stderr on one line, for logs.
func shortErr(r result) string {
	return string(bytes.TrimSpace([]byte(strings.ReplaceAll(r.Stderr, "\n", " | "))))
}

// gated is an observed command that waits for gate (polling, so that it is
// never stuck for long in one sleep after its gate opened or its shell died).
func (o *observer) gated(label, gate string) ([]string, *obsRun) {
	return o.cmd(label, `while [ ! -e "$1" ]; do sleep 0.02; done`, gate)
}
