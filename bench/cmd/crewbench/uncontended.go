package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Uncontended start: one caller, a free slot, the command is `true`.
// crew on tmpfs and on the work directory's filesystem, each beside its
// anchor of issue 25 (floor-cobra; the durable floor on the same
// filesystem), with flock, tsp and nq, all in one alternation (A B C ...,
// A B C ...); sem, 50 times slower, in a second one against crew on disk.

const (
	crewTmpfs    = "crew, tmpfs"
	floorCobra   = "floor-cobra"
	durableTmpfs = "durable floor, tmpfs"
	crewDisk     = "crew, disk"
	durableDisk  = "durable floor, disk"
	flockTmp     = "flock, tmpfs"
	flockDisk    = "flock, disk"
	crewSem      = "crew, disk (sem rounds)"
)

func (h uncontendedScenario) scenarioUncontended() error {
	r := &h.rep
	r.heading(2, "Uncontended start: one caller, a free slot, the command is `true`")
	cs, stop, err := h.uncontendedContenders()
	defer stop()
	if err != nil {
		return err
	}
	all, err := h.alternate("uncontended", cs, h.cfg.n(200, 40), 3)
	if err != nil {
		return err
	}
	if sem, err := h.semContenders(); err != nil {
		return err
	} else if sem != nil {
		ss, err := h.alternate("uncontended vs sem", sem, h.cfg.n(30, 8), 2)
		if err != nil {
			return err
		}
		all = append(all, ss...)
	}
	by := map[string]*series{}
	var rows [][]string
	for _, s := range all {
		by[s.name] = s
		rows = append(rows, []string{s.name, "`" + s.what + "`", fmt.Sprint(len(s.samples)), ms(s.median()), s.spread(), ms(s.cpuMedian())})
	}
	r.table([]string{"contender", "command", "runs", "median", "p10–p90", "CPU median"}, rows)
	r.para("Wall time is from fork to reaped exit of the process the user runs; CPU is user + system time charged to it and the children it waited for (wait4's rusage; n/a for nq, whose job runs in a detached process). Disk is the work directory's filesystem (" + h.diskLabel() + "); tmpfs is `/dev/shm`. The durable floor (`bench/cmd/floor-durable`) is `floor-cobra` plus one file per run created under an exclusive flock on an admission lock and held under its own (the owner lock), the reservation written and made durable (fsync of the file and of its directory) before the admission lock is released, and the outcome written into the same file and made durable: three fsyncs, no file freed.")
	h.uncontendedRatios(by)
	h.uncontendedCPU(by)
	r.para("What each command does:\n\n" + h.peerDocs())
	return nil
}

// uncontendedContenders are the fast contenders, run in one alternation;
// stop ends the tsp server.
func (h uncontendedScenario) uncontendedContenders() ([]contender, func(), error) {
	ok := []int{0}
	stop := func() {}
	var cs []contender
	add := func(name, what string, run func() (sample, error)) {
		cs = append(cs, contender{name: name, what: what, run: run})
	}
	fl, err := h.buildFloors()
	if err != nil {
		return nil, stop, err
	}
	flock := h.peers["flock"].bin
	shm := h.tmpfs()
	if shm != "" {
		root := filepath.Join(shm, "uncontended")
		if err := h.initRoot(root, 4); err != nil {
			return nil, stop, err
		}
		add(crewTmpfs, "crew --root TMPFS/R start t -- true", h.execRunner(h.env, ok, h.crew, "--root", root, "start", "t", "--", "true"))
	}
	add(floorCobra, "floor-cobra start t -- true", h.execRunner(h.env, ok, fl.cobra, "start", "t", "--", "true"))
	if shm != "" {
		dir := filepath.Join(shm, "durable-floor")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, stop, fmt.Errorf("durable floor's directory: %w", err)
		}
		add(durableTmpfs, "floor-durable --root TMPFS/D start t -- true", h.execRunner(h.env, ok, fl.durable, "--root", dir, "start", "t", "--", "true"))
	}
	root := h.path("roots", "uncontended")
	if err := h.initRoot(root, 4); err != nil {
		return nil, stop, err
	}
	add(crewDisk, "crew --root R start t -- true", h.execRunner(h.env, ok, h.crew, "--root", root, "start", "t", "--", "true"))
	dir := h.path("roots", "durable-floor")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, stop, fmt.Errorf("durable floor's directory: %w", err)
	}
	add(durableDisk, "floor-durable --root D start t -- true", h.execRunner(h.env, ok, fl.durable, "--root", dir, "start", "t", "--", "true"))
	if flock != "" {
		if shm != "" {
			add(flockTmp, "flock TMPFS/F true", h.execRunner(h.env, ok, flock, filepath.Join(shm, "uncontended.flock"), "true"))
		}
		add(flockDisk, "flock F true", h.execRunner(h.env, ok, flock, h.path("tmp", "uncontended.flock"), "true"))
	}
	if p := h.peers["tsp"]; p.bin != "" {
		env, stopTsp, err := h.tspServer("uncontended", 4)
		if err != nil {
			return nil, stop, err
		}
		stop = stopTsp
		add("tsp", "tsp -f -n true (server started with tsp -S 4)", h.execRunner(env, ok, p.bin, "-f", "-n", "true"))
	}
	if p := h.peers["nq"]; p.bin != "" {
		nqdir := h.path("tmp", "nq-uncontended")
		if err := os.MkdirAll(nqdir, 0o700); err != nil {
			return nil, stop, fmt.Errorf("nq directory: %w", err)
		}
		add("nq", "nq true; nq -w ID", h.nqRunner(nqdir))
	}
	return cs, stop, nil
}

// semContenders are crew on disk and sem, or nil without sem.
func (h uncontendedScenario) semContenders() ([]contender, error) {
	p := h.peers["sem"]
	if p.bin == "" {
		return nil, nil
	}
	root := h.path("roots", "uncontended-sem")
	if err := h.initRoot(root, 4); err != nil {
		return nil, err
	}
	ok := []int{0}
	return []contender{
		{name: crewSem, what: "crew --root R start t -- true", run: h.execRunner(h.env, ok, h.crew, "--root", root, "start", "t", "--", "true")},
		{name: "sem", what: "sem --will-cite --fg -j 4 --id x true", run: h.execRunner(h.env, ok, p.bin, "--will-cite", "--fg", "-j", "4", "--id", "x", "true")},
	}, nil
}

// uncontendedRatios reports crew ÷ each anchor and peer, and fills the
// figures: issue 25's against the floors, the peers' as context, the
// retired ones against flock.
func (h uncontendedScenario) uncontendedRatios(by map[string]*series) {
	type cmp struct {
		id         figureID
		crew, peer string
		limit      float64
		onDisk     bool // meaningless when the work directory is itself on tmpfs
	}
	cmps := []cmp{
		{figDurableDisk, crewDisk, durableDisk, 1.3, true},
		{figCobraTmpfs, crewTmpfs, floorCobra, 1.3, false},
		{figTmpfs, crewTmpfs, flockTmp, 2.0, false},
		{figDisk, crewDisk, flockDisk, 3.0, true},
		{figVsTsp, crewDisk, "tsp", 0, false},
		{figVsNq, crewDisk, "nq", 0, false},
		{figVsSem, crewSem, "sem", 0, false},
	}
	var rows [][]string
	for _, c := range cmps {
		a, b := by[c.crew], by[c.peer]
		if a == nil || b == nil {
			h.notMeasured(c.id, h.whyMissing(c.peer))
			rows = append(rows, []string{c.crew + " ÷ " + c.peer, "—", "—", "—", "—", h.figures[c.id].goal, h.figures[c.id].result})
			continue
		}
		rt := ratio(a.median(), b.median())
		if c.onDisk && h.workOnTmpfs() {
			h.notMeasured(c.id, "the work directory is on tmpfs; pass -tmp DIR on a disk filesystem")
		} else {
			h.measured(c.id, fmt.Sprintf("%s ÷ %s = **%.2f×** (crew − %s %s)", ms(a.median()), ms(b.median()), rt, c.peer, ms(a.median()-b.median())), ratioSpread(a, b), rt <= c.limit)
		}
		rows = append(rows, []string{c.crew + " ÷ " + c.peer, ms(a.median()), ms(b.median()), fmt.Sprintf("%.2f", rt),
			ratioSpread(a, b), h.figures[c.id].goal, h.figures[c.id].result})
	}
	h.rep.table([]string{"comparison", "crew median", "anchor or peer median", "ratio of medians", "per-round ratio", "goal", "result"}, rows)
}

// uncontendedCPU compares crew's CPU per start (wait4's rusage of the
// process and what it waited for) with floor-cobra's: the figure is crew
// on disk (what a user's start costs); crew on tmpfs is beside it.
func (h uncontendedScenario) uncontendedCPU(by map[string]*series) {
	fl, disk := by[floorCobra], by[crewDisk]
	if fl == nil || disk == nil || fl.cpuMedian() <= 0 {
		h.notMeasured(figCPU, "floor-cobra or crew on disk was not run")
		return
	}
	rt := ratio(disk.cpuMedian(), fl.cpuMedian())
	spread := fmt.Sprintf("CPU p10–p90: crew %s, floor-cobra %s", cpuSpread(disk), cpuSpread(fl))
	if t := by[crewTmpfs]; t != nil {
		spread += fmt.Sprintf("; crew on tmpfs %s = %.2f×", ms(t.cpuMedian()), ratio(t.cpuMedian(), fl.cpuMedian()))
	}
	if d := by[durableDisk]; d != nil {
		spread += fmt.Sprintf("; durable floor on disk %s", ms(d.cpuMedian()))
	}
	h.measured(figCPU, fmt.Sprintf("%s ÷ %s = **%.2f×**", ms(disk.cpuMedian()), ms(fl.cpuMedian()), rt), spread, rt <= 1.3)
	h.rep.para(fmt.Sprintf("CPU per start: crew on disk %s, floor-cobra %s (%.2f×; goal ≤ 1.3×). %s.", ms(disk.cpuMedian()), ms(fl.cpuMedian()), rt, spread))
}

// cpuSpread is the p10–p90 of a series' CPU times.
func cpuSpread(s *series) string {
	return ms(percentile(s.cpus(), 10)) + "–" + ms(percentile(s.cpus(), 90))
}

// whyMissing says why a contender was not run.
func (h *harness) whyMissing(name string) string {
	peer, _, _ := strings.Cut(name, ",")
	if p := h.peers[peer]; p != nil && p.bin == "" {
		return peer + " is not installed (`" + p.install + "`)"
	}
	if strings.Contains(name, "tmpfs") {
		return "/dev/shm is not a tmpfs here"
	}
	return name + " was not run"
}

func (h uncontendedScenario) workOnTmpfs() bool { return fsType(h.env, h.work) == "tmpfs" }

// diskLabel names the work directory's filesystem, e.g. "ext4 on /dev/vda".
func (h *harness) diskLabel() string {
	out, err := output(h.env, "df", "-T", h.work)
	if err != nil {
		return fsType(h.env, h.work)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if f := strings.Fields(lines[len(lines)-1]); len(f) >= 2 {
		return f[1] + " on " + f[0]
	}
	return fsType(h.env, h.work)
}

// peerDocs says what each installed contender's command does.
func (h uncontendedScenario) peerDocs() string {
	var docs []string
	for _, name := range append([]string{"crew"}, peerOrder...) {
		if name == "crew" || h.peers[name].bin != "" {
			docs = append(docs, "- **"+name+"**: "+peerDoc[name])
		}
	}
	return strings.Join(docs, "\n")
}

// nqRunner enqueues `true` with nq and waits for it with nq -w: nq
// detaches the job, so both processes are needed to see it finish.
func (h uncontendedScenario) nqRunner(nqdir string) func() (sample, error) {
	nq := h.peers["nq"].bin
	env := withEnv(h.env, "NQDIR="+nqdir)
	return func() (sample, error) {
		start := time.Now()
		c1 := exec.Command(nq, "true")
		c1.Env = env
		out, err := c1.Output()
		if err != nil {
			return sample{}, fmt.Errorf("nq true: %w", err)
		}
		id := strings.TrimSpace(string(out))
		c2 := exec.Command(nq, "-w", id)
		c2.Env = env
		if err := c2.Run(); err != nil {
			return sample{}, fmt.Errorf("nq -w %s: %w", id, err)
		}
		wall := time.Since(start)
		_ = os.Remove(filepath.Join(nqdir, id))
		return sample{wall: wall, cpu: -1}, nil
	}
}
