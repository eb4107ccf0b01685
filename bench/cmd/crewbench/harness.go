package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// harness holds what every scenario shares.
type harness struct {
	cfg     *config
	rep     report
	work    string // private work directory; removed at the end unless -keep
	crew    string // the crew binary under test
	self    string // this program, re-executed as observer, gate and noop
	crewSrc string // crew's source tree it was built from ("" with -crew)
	env     []string
	peers   map[string]*peer
	cleanMu sync.Mutex
	cleans  []func()
	cleaned bool
	counter atomic.Int64
	// what the layout check learned from crew (probe.go).
	sample *crewSample
	// crew with the etcd store and crew's development etcd, built once
	// (etcd.go).
	etcdOnce sync.Once
	etcdBins [2]string
	// the performance issue's figures (figures.go), and other checks,
	// for the summary tables at the end.
	figures []figure
	summary [][]string
	shm     string // private directory on tmpfs, made once ("" when none)
}

// The scenarios, and the other parts of a run, are types of their own
// over the harness they run in.
type (
	activeScenario      struct{ *harness } // the active scenario (active.go)
	concurrentScenario  struct{ *harness } // the concurrent scenario (concurrent.go)
	correctnessScenario struct{ *harness } // the correctness scenario (correctness.go)
	diagScenario        struct{ *harness } // the diag scenario (diag.go)
	etcdScenario        struct{ *harness } // the etcd scenario (etcd.go)
	fleetScenario       struct{ *harness } // the fleet scenario (fleet.go)
	historyScenario     struct{ *harness } // the history scenario (history.go)
	killScenario        struct{ *harness } // the kill scenario (kill.go)
	queueScenario       struct{ *harness } // the queue scenario (queue.go, idle.go)
	recoverScenario     struct{ *harness } // the recover scenario (recover.go)
	rssScenario         struct{ *harness } // the rss scenario (rss.go)
	uncontendedScenario struct{ *harness } // the uncontended scenario (uncontended.go)
	machineReport       struct{ *harness } // the report's description of the machine (machine.go)
	layoutProbe         struct{ *harness } // the check of crew's state-root layout (probe.go)
)

// newHarness makes the private work directory and registers its removal;
// setup does the rest, once the caller has arranged for cleanup to run.
func newHarness(c *config) (*harness, error) {
	h := &harness{cfg: c, figures: issueFigures()}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find my own executable: %w", err)
	}
	h.self = self
	if err := os.MkdirAll(c.tmpBase, 0o755); err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	if h.work, err = os.MkdirTemp(c.tmpBase, "crewbench-"); err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	h.work, _ = filepath.Abs(h.work)
	h.atCleanup(func() {
		if c.keep {
			fmt.Fprintf(os.Stderr, "crewbench: kept %s\n", h.work)
			return
		}
		h.progress("removing %s", h.work)
		if err := os.RemoveAll(h.work); err != nil {
			fmt.Fprintf(os.Stderr, "crewbench: remove %s: %v\n", h.work, err)
		}
	})
	h.env = h.baseEnv()
	return h, nil
}

// setup makes the work directory's parts, gets the crew binary (built, or
// -crew), finds the peers, and checks crew's state-root layout.
func (h *harness) setup() error {
	for _, d := range []string{"tmp", "stderr", "parallel-home", "roots"} {
		if err := os.MkdirAll(h.path(d), 0o700); err != nil {
			return fmt.Errorf("work directory: %w", err)
		}
	}
	if h.cfg.crewBin != "" {
		abs, err := filepath.Abs(h.cfg.crewBin)
		if err != nil {
			return fmt.Errorf("-crew: %w", err)
		}
		h.crew = abs
	} else if err := h.buildCrew(); err != nil {
		return err
	}
	h.peers = findPeers(h.env)
	return layoutProbe{h}.checkLayout()
}

// baseEnv is the environment every measured process gets: ours, without
// anything that would point a tool at a user's real state, plus private
// homes for GNU parallel and temporary files.
func (h *harness) baseEnv() []string {
	drop := []string{"CREW_ROOT", "TS_SOCKET", "TS_SLOTS", "TS_MAXFINISHED", "TS_ONFINISH", "TS_ENV", "TS_SAVELIST",
		"NQDIR", "PARALLEL_HOME", "PARALLEL", "TMPDIR", "CREW_FAILPOINT"}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(drop, k) {
			env = append(env, kv)
		}
	}
	return append(env,
		"PARALLEL_HOME="+filepath.Join(h.work, "parallel-home"),
		"TMPDIR="+filepath.Join(h.work, "tmp"))
}

func withEnv(env []string, kv ...string) []string {
	return append(slices.Clone(env), kv...)
}

func (h *harness) path(parts ...string) string {
	return filepath.Join(append([]string{h.work}, parts...)...)
}

func (h *harness) seq() int64 { return h.counter.Add(1) }

func (h *harness) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "crewbench: %s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (h *harness) atCleanup(f func()) {
	h.cleanMu.Lock()
	defer h.cleanMu.Unlock()
	h.cleans = append(h.cleans, f)
}

// cleanup runs the registered clean-ups, newest first, once.
func (h *harness) cleanup() {
	h.cleanMu.Lock()
	defer h.cleanMu.Unlock()
	if h.cleaned {
		return
	}
	h.cleaned = true
	for i := len(h.cleans) - 1; i >= 0; i-- {
		h.cleans[i]()
	}
}

const crewModule = "github.com/crew-dev/crew"

// crewSource returns crew's source tree: dir (-crew-src) when given, else
// the nearest parent of the working directory whose go.mod declares crew's
// module (the harness's own module, crew/bench, is not it). Either way the
// directory must hold crew's go.mod, so a wrong path fails here, not in
// the middle of a build.
func crewSource(dir string) (string, error) {
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", fmt.Errorf("-crew-src %s: %w", dir, err)
		}
		if !isCrewModule(abs) {
			return "", fmt.Errorf("-crew-src %s: no go.mod declaring module %s there", dir, crewModule)
		}
		return abs, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find crew's source: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if isCrewModule(d) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod declaring module %s in %s or above; pass -crew-src DIR (make bench does)", crewModule, wd)
		}
	}
}

func isCrewModule(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1] == crewModule
		}
	}
	return false
}

// buildCrew makes the production binary under test with crew's own
// `make build` (static, no tags, no race detector): exactly what a user
// who follows the README gets.
func (h *harness) buildCrew() error {
	src, err := crewSource(h.cfg.crewSrc)
	if err != nil {
		return err
	}
	h.crewSrc = src
	h.crew = h.path("crew")
	h.progress("building crew: make build BIN=%s (in %s)", h.crew, src)
	cmd := exec.Command("make", "build", "BIN="+h.crew)
	cmd.Dir = src
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build crew: %w", err)
	}
	return nil
}

// runAll runs the selected scenarios; a scenario that fails is reported
// and the others still run. The figures of the issue come last, side by
// side, measured or not.
func (h *harness) runAll() (failed bool) {
	machineReport{h}.machine()
	steps := []struct {
		name string
		run  func() error
	}{
		{"uncontended", uncontendedScenario{h}.scenarioUncontended},
		// Right after uncontended, before history and recover create and
		// delete 100,000s of files: on ext4 without a journal, file
		// creation slows for minutes after mass deletions.
		{"diag", diagScenario{h}.scenarioDiagnostics},
		{"concurrent", concurrentScenario{h}.scenarioConcurrent},
		{"active", activeScenario{h}.scenarioActive},
		// The queue's latencies before history and recover churn the disk
		// and before correctness loads the machine: right after history
		// and recover its handoff p99 was 58 ms, alone 9 ms (ext4 without
		// a journal scans past recently deleted inodes on every file
		// creation, for a while after mass deletions; docs/benchmarks.md).
		{"queue", queueScenario{h}.scenarioQueue},
		{"kill", killScenario{h}.scenarioKill},
		{"rss", rssScenario{h}.scenarioRSS},
		{"etcd", etcdScenario{h}.scenarioEtcd},
		{"fleet", fleetScenario{h}.scenarioFleet},
		{"correctness", correctnessScenario{h}.scenarioCorrectness},
		{"history", historyScenario{h}.scenarioHistory},
		{"recover", recoverScenario{h}.scenarioRecover},
	}
	for _, s := range steps {
		if !h.cfg.want(s.name) {
			continue
		}
		start := time.Now()
		if err := s.run(); err != nil {
			failed = true
			h.progress("%s FAILED: %v", s.name, err)
			h.rep.note(fmt.Sprintf("Scenario %s failed: %v", s.name, err))
			h.failFigures(s.name, err)
		}
		h.progress("%s took %s", s.name, time.Since(start).Round(100*time.Millisecond))
	}
	h.reportFigures()
	if len(h.summary) > 0 {
		h.rep.heading(2, "Other checks")
		h.rep.table([]string{"check", "measured", "goal", "result"}, h.summary)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	if len(load) > 0 {
		h.rep.para("Load average at the end: `" + strings.TrimSpace(string(load)) + "`.")
	}
	return failed
}

func (h *harness) target(scenario, measured, target string, ok bool) {
	h.summary = append(h.summary, []string{scenario, measured, target, metStr(ok)})
}
