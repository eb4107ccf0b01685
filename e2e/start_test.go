package e2e

import (
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStartStreamsOutputAndLogsIt(t *testing.T) {
	e := newEnv(t)
	r := e.run("start", "hello", "--", "sh", "-c", `echo out; echo err >&2; echo "$CREW_TASK|$CREW_ROOT|$CREW_RUN_ID"`)
	require.Equal(t, 0, r.Code, r.Stderr)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, "out", lines[0])
	assert.Equal(t, "err\n", r.Stderr)
	envParts := strings.Split(lines[1], "|")
	require.Len(t, envParts, 3)
	assert.Equal(t, "hello", envParts[0])
	assert.Equal(t, e.root, envParts[1])
	assert.Regexp(t, `^r-\d{8}T\d{6}\.\d{9}Z-[0-9a-f]{16}$`, envParts[2])

	rec := e.runRecord(envParts[2])
	assert.Equal(t, "succeeded", rec.State)
	require.NotNil(t, rec.ExitCode)
	assert.Equal(t, 0, *rec.ExitCode)
	require.NotEmpty(t, rec.LogPath)
	log, err := os.ReadFile(rec.LogPath)
	require.NoError(t, err)
	assert.Contains(t, string(log), "out\n")
	assert.Contains(t, string(log), "err\n")
}

func TestStartPassesStdin(t *testing.T) {
	e := newEnv(t)
	cmd := e.command(nil, "start", "cat", "--", "cat")
	cmd.Stdin = strings.NewReader("from stdin\n")
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, "from stdin\n", string(out))
}

func TestStartExitCodes(t *testing.T) {
	e := newEnv(t)
	notExec := filepath.Join(e.dir, "not-executable.sh")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\necho hi\n"), 0o600))
	cases := []struct {
		name, task string
		cmd        []string
		code       int
		state      string
		stderr     string
		reason     string
	}{
		{"exit code", "ec", []string{"sh", "-c", "exit 3"}, 3, "failed", "", "command exited with status 3"},
		{"killed by signal", "sig", []string{"sh", "-c", "kill -KILL $$"}, 137, "failed", "", "command was killed by SIGKILL"},
		{"not found", "nf", []string{"no-such-command-crew-e2e"}, 127, "failed", "crew: nf: command not found: no-such-command-crew-e2e", "command not found: no-such-command-crew-e2e"},
		{"not found path", "nfp", []string{"./missing"}, 127, "failed", "crew: nfp: command not found: ./missing", "command not found"},
		{"not executable", "nx", []string{notExec}, 126, "failed", "crew: nx: command not executable: " + notExec + ": permission denied", "permission denied"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.run(append([]string{"start", c.task, "--"}, c.cmd...)...)
			assert.Equal(t, c.code, r.Code, r.Stderr)
			if c.stderr != "" {
				assert.Contains(t, r.Stderr, c.stderr)
			}
			s := e.status(c.task)
			require.Len(t, s.Finished, 1)
			assert.Equal(t, c.state, s.Finished[0].State)
			assert.Contains(t, s.Finished[0].Reason, c.reason)
			require.NotNil(t, s.Finished[0].ExitCode)
			assert.Equal(t, c.code, *s.Finished[0].ExitCode)
		})
	}
}

// TestSignalsAreForwardedAndRecorded: SIGINT, SIGTERM and SIGHUP to crew
// reach the command's process group, grandchildren included, and the run is
// recorded as stopped with the signal named.
func TestSignalsAreForwardedAndRecorded(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			e := newEnv(t)
			// sh starts a grandchild (sleep) and waits for it.
			started := filepath.Join(e.dir, "grandchild")
			p := e.start(nil, "start", "sleeper", "--", "sh", "-c", `sleep 60 & echo $! > "$1"; wait`, "x", started)
			run := e.activeRun("sleeper")
			e.killRunAtCleanup(run)
			// Else the signal might reach the group before it has a grandchild.
			eventually(t, 10*time.Second, "the grandchild to start", func() bool { return exists(started) })
			require.NoError(t, p.cmd.Process.Signal(sig))
			r := p.wait(t, 10*time.Second)
			assert.Equal(t, 128+int(sig), r.Code, r.Stderr)
			rec := e.runRecord(run.RunID)
			assert.Equal(t, "stopped", rec.State)
			assert.Equal(t, signalName(sig), rec.Signal)
			assert.Contains(t, rec.Reason, "crew received "+signalName(sig))
			eventually(t, 5*time.Second, "the process group to be gone", func() bool {
				return !groupAlive(run.PGID)
			})
			assert.Equal(t, 0, e.status().SlotsInUse)
		})
	}
}

// TestGraceThenSIGKILL: a command that ignores SIGTERM is killed after
// --grace.
func TestGraceThenSIGKILL(t *testing.T) {
	e := newEnv(t)
	started := filepath.Join(e.dir, "grandchild")
	p := e.start(nil, "start", "--grace", "300ms", "stubborn", "--", "sh", "-c", `trap "" TERM; sleep 60 & echo $! > "$1"; wait; wait`, "x", started)
	run := e.activeRun("stubborn")
	e.killRunAtCleanup(run)
	// Else SIGTERM might reach sh before its trap is set.
	eventually(t, 10*time.Second, "the command to ignore SIGTERM and start its grandchild", func() bool { return exists(started) })
	start := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	r := p.wait(t, 10*time.Second)
	assert.Equal(t, 137, r.Code, r.Stderr)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "SIGKILL waited for the grace period")
	rec := e.runRecord(run.RunID)
	assert.Equal(t, "stopped", rec.State)
	assert.Equal(t, "SIGTERM", rec.Signal)
	assert.Contains(t, rec.Reason, "sent SIGKILL after the 300ms grace period")
	eventually(t, 5*time.Second, "the process group to be gone", func() bool {
		return !groupAlive(run.PGID)
	})
}

// TestSignalWhileWaitingForTheLock abandons the wait and records nothing.
func TestSignalWhileWaitingForTheLock(t *testing.T) {
	e := newEnv(t)
	gate, openGate := e.gate("holder")
	holder := e.start([]string{"CREW_FAILPOINT=admission-locked:wait:" + gate}, "start", "holder", "--", "true")
	eventually(t, 10*time.Second, "the holder to take the admission lock", func() bool { return exists(gate + ".reached") })
	marker, _ := e.gate("contended")
	require.NoError(t, os.WriteFile(marker, nil, 0o600))
	waiter := e.start([]string{"CREW_FAILPOINT=admission-contended:wait:" + marker}, "start", "waiter", "--", "true")
	eventually(t, 10*time.Second, "the waiter to wait for the lock", func() bool { return exists(marker + ".reached") })
	require.NoError(t, waiter.cmd.Process.Signal(syscall.SIGINT))
	r := waiter.wait(t, 10*time.Second)
	assert.Equal(t, 130, r.Code)
	assert.Contains(t, r.Stderr, "received SIGINT while waiting for admission; nothing was started")
	openGate()
	assert.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
	assert.Empty(t, e.status("waiter").Finished, "nothing was recorded for the abandoned start")
}

// TestProductionBinaryHasNoFailpoints: failpoints exist only under the
// failpoints build tag.
// The production build checked is the one the benchmarks measure.
func TestProductionBinaryHasNoFailpoints(t *testing.T) {
	bin := plainCrew(t) // make build
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	assert.NotContains(t, string(data), "CREW_FAILPOINT", "production build contains failpoint code")
	assert.NotContains(t, string(data), "admission-locked", "production build contains failpoint names")
	test, err := os.ReadFile(crewBin)
	require.NoError(t, err)
	assert.Contains(t, string(test), "CREW_FAILPOINT", "the check above would notice failpoints")
	assert.Contains(t, string(test), "admission-locked", "the check above would notice failpoint names")
}

// A mistyped failpoint (or an action its kind does not take) stops a
// failpoints build at once, naming what exists: a test that means to
// force an interleaving can never silently force nothing.
func TestMistypedFailpointIsRefused(t *testing.T) {
	e := newEnv(t)
	for spec, want := range map[string]string{
		"admision-locked:kill":  `crew: CREW_FAILPOINT: "admision-locked" is not a failpoint; the failpoints are admission-lock, admission-contended, admission-locked,`,
		"fence:kill":            `crew: CREW_FAILPOINT: failpoint fence takes skip, not "kill"`,
		"admission-locked:wait": "crew: CREW_FAILPOINT: admission-locked:wait needs an argument (a path)",
	} {
		r := e.runEnv([]string{"CREW_FAILPOINT=" + spec}, "start", "x", "--", "true")
		assert.Equal(t, 125, r.Code, "%s: %s", spec, r.Stderr)
		assert.Contains(t, r.Stderr, want, spec)
		assert.Empty(t, e.status("x").Finished, "%s: nothing ran", spec)
	}
}

// TestProductionBinaryIsStatic: the binary `make build` makes (what the
// docs/development.md tells users to build, and what the benchmarks measure) is linked
// statically. A dynamically linked crew pays the dynamic loader and libc's
// start-up on every start (1.2-2.0 ms on these machines); cobra's flag
// package imports net, which makes a cgo build dynamic, so this breaks
// whenever the build loses CGO_ENABLED=0.
func TestProductionBinaryIsStatic(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("static linking is checked on Linux (ELF)")
	}
	f, err := elf.Open(plainCrew(t))
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "the production binary asks for a dynamic loader")
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	assert.Empty(t, libs, "the production binary needs shared libraries")
}

// TestProductionBinaryHasNoEtcd: the local default (`make build`) links
// neither the etcd client nor the lease guard; they cost a start about
// 5 ms of package init, and only `make build-etcd` may pay it.
func TestProductionBinaryHasNoEtcd(t *testing.T) {
	info, err := buildinfo.ReadFile(plainCrew(t))
	require.NoError(t, err)
	require.NotEmpty(t, info.Deps, "the check below would see the modules crew links")
	for _, d := range info.Deps {
		assert.NotContains(t, d.Path, "etcd", "the local build links %s", d.Path)
		assert.NotContains(t, d.Path, "grpc", "the local build links %s", d.Path)
	}
	out, err := exec.Command(plainCrew(t), "--store", "etcd://127.0.0.1:1/x", "status").CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 125, exit.ExitCode())
	assert.Contains(t, string(out), "this crew was built without the etcd backend; build the one that has it with `make build-etcd`")
}
