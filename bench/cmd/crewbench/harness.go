package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	// results collected for the summary table at the end.
	summary [][]string
}

// newHarness makes the private work directory and registers its removal;
// setup does the rest, once the caller has arranged for cleanup to run.
func newHarness(c *config) (*harness, error) {
	h := &harness{cfg: c}
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
	return h.checkLayout()
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

// buildCrew makes the production binary under test: no tags, no race
// detector, exactly what `go build ./cmd/crew` gives a user.
func (h *harness) buildCrew() error {
	src, err := crewSource(h.cfg.crewSrc)
	if err != nil {
		return err
	}
	h.crewSrc = src
	h.crew = h.path("crew")
	h.progress("building crew: go build -o %s ./cmd/crew (in %s)", h.crew, src)
	cmd := exec.Command("go", "build", "-o", h.crew, "./cmd/crew")
	cmd.Dir = src
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build crew: %w", err)
	}
	return nil
}

// runAll runs the selected scenarios; a scenario that fails is reported
// and the others still run.
func (h *harness) runAll() (failed bool) {
	h.machine()
	steps := []struct {
		name string
		run  func() error
	}{
		{"uncontended", h.scenarioUncontended},
		// Right after uncontended, before history and recover create and
		// delete 100,000s of files: on ext4 without a journal, file
		// creation slows for minutes after mass deletions.
		{"diag", h.scenarioDiagnostics},
		{"history", h.scenarioHistory},
		{"recover", h.scenarioRecover},
		{"rss", h.scenarioRSS},
		{"correctness", h.scenarioCorrectness},
		{"queue", h.scenarioQueue},
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
		}
		h.progress("%s took %s", s.name, time.Since(start).Round(100*time.Millisecond))
	}
	if len(h.summary) > 0 {
		h.rep.heading(2, "Summary: targets")
		h.rep.table([]string{"scenario", "measured", "target", "result"}, h.summary)
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

// machine reports what the numbers were measured on.
func (h *harness) machine() {
	r := &h.rep
	r.heading(1, "crew benchmark results")
	quick := ""
	if h.cfg.quick {
		quick = " (-quick: fewer iterations, smaller history; not for publication)"
	}
	r.para("Produced by `make bench` (`cd bench && go run ./cmd/crewbench -crew-src ..`)" + quick + ". Every figure is a median (or p90) over many runs; contenders of one comparison run alternately (A B A B ...).")
	var rows [][]string
	rows = append(rows, []string{"date (UTC)", time.Now().UTC().Format("2006-01-02 15:04")})
	cpu := firstMatch("/proc/cpuinfo", "model name")
	rows = append(rows, []string{"CPU", fmt.Sprintf("%d cores (runtime.NumCPU), %s", runtime.NumCPU(), cpu)})
	if mem := firstMatch("/proc/meminfo", "MemTotal"); mem != "" {
		rows = append(rows, []string{"memory", mem})
	}
	if out, err := output(h.env, "uname", "-srm"); err == nil {
		rows = append(rows, []string{"kernel", strings.TrimSpace(out)})
	}
	fs, dev, mnt := filesystemOf(h.env, h.work)
	rows = append(rows, []string{"state roots", "`" + h.work + "`"})
	rows = append(rows, []string{"filesystem of the state roots", fs})
	if opts := mountOptions(mnt); opts != "" {
		rows = append(rows, []string{"mount options", "`" + opts + "`"})
	}
	if dev != "" {
		rows = append(rows, []string{"block device", blockDevice(dev)})
		if j := ext4Journal(dev); j != "" {
			rows = append(rows, []string{"ext4 journal", j})
		}
	}
	rows = append(rows, []string{"Go (harness)", runtime.Version()})
	if out, err := output(h.env, "go", "version"); err == nil {
		rows = append(rows, []string{"Go (crew build)", strings.TrimSpace(out)})
	}
	rows = append(rows, []string{"crew", h.crewVersion()})
	for _, name := range peerOrder {
		p := h.peers[name]
		if p.bin == "" {
			rows = append(rows, []string{name, "not installed (" + p.note + "): `" + p.install + "`"})
			continue
		}
		rows = append(rows, []string{name, fmt.Sprintf("`%s`: %s", p.bin, p.version)})
	}
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		rows = append(rows, []string{"load average at start", "`" + strings.TrimSpace(string(load)) + "`"})
	}
	r.table([]string{"", ""}, rows)
	for _, name := range peerOrder {
		if p := h.peers[name]; p.bin == "" {
			r.note(fmt.Sprintf("%s is not installed, so its columns are skipped. Install it with `%s`.", name, p.install))
		}
	}
}

func (h *harness) crewVersion() string {
	out, err := output(h.env, "go", "version", "-m", h.crew)
	if err != nil {
		return h.crew
	}
	rev, mod := "", ""
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "build" {
			if v, ok := strings.CutPrefix(f[1], "vcs.revision="); ok {
				rev = v
			}
			if v, ok := strings.CutPrefix(f[1], "vcs.modified="); ok {
				mod = v
			}
		}
	}
	s := "`" + h.crew + "`"
	if h.cfg.crewBin == "" {
		s = "production build (`go build ./cmd/crew`, no tags) of the working tree"
		if rev == "" && h.crewSrc != "" {
			// No VCS stamp in the binary: ask git, read-only.
			if out, err := output(h.env, "git", "-C", h.crewSrc, "rev-parse", "--short=12", "HEAD"); err == nil {
				s += " at HEAD " + strings.TrimSpace(out)
			}
		}
	}
	if rev != "" {
		s += ", commit " + rev[:min(12, len(rev))]
		if mod == "true" {
			s += " + uncommitted changes"
		}
	}
	return s
}

// firstMatch returns the value of the first "key : value" line of a
// /proc file, or "".
func firstMatch(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// filesystemOf describes dir's filesystem with df -T and stat -f, and
// returns its device and mount point.
func filesystemOf(env []string, dir string) (desc, dev, mnt string) {
	var parts []string
	if out, err := output(env, "df", "-T", dir); err == nil {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if f := strings.Fields(lines[len(lines)-1]); len(f) >= 7 {
			dev, mnt = f[0], f[6]
			parts = append(parts, fmt.Sprintf("`df -T`: %s on %s, type %s", dev, mnt, f[1]))
		}
	}
	if out, err := output(env, "stat", "-f", "-c", "%T, block size %S", dir); err == nil {
		parts = append(parts, "`stat -f`: "+strings.TrimSpace(out))
	}
	if len(parts) == 0 {
		return "unknown", "", ""
	}
	return strings.Join(parts, "; "), dev, mnt
}

func mountOptions(mnt string) string {
	if mnt == "" {
		return ""
	}
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return ""
	}
	found := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[1] == mnt {
			found = f[2] + " " + f[3] // the last mount at that point wins
		}
	}
	return found
}

func blockDevice(dev string) string {
	name := strings.TrimPrefix(dev, "/dev/")
	if strings.Contains(name, "/") {
		return dev
	}
	q := "/sys/block/" + name + "/queue/"
	if _, err := os.Stat(q); err != nil {
		return dev
	}
	read := func(f string) string {
		b, _ := os.ReadFile(q + f)
		return strings.TrimSpace(string(b))
	}
	rot := map[string]string{"0": "non-rotational", "1": "rotational"}[read("rotational")]
	return fmt.Sprintf("%s: %s, write cache %q", dev, rot, read("write_cache"))
}

// ext4Journal says whether an ext4 filesystem has a journal, from
// /sys/fs/ext4/<dev>/journal_task ("<none>" without one); "" if unknown.
func ext4Journal(dev string) string {
	b, err := os.ReadFile("/sys/fs/ext4/" + strings.TrimPrefix(dev, "/dev/") + "/journal_task")
	if err != nil {
		return ""
	}
	switch t := strings.TrimSpace(string(b)); t {
	case "<none>", "":
		return "**none** (`journal_task` is `<none>`): fsync writes the inode and data in place, and creating a file scans past inodes deleted in the last minutes (ext4 `recently_deleted`, only done without a journal)"
	default:
		return "yes (jbd2 thread " + t + ")"
	}
}
