package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ---------------------------------------------------------------------------
// Uncontended start.

func (h *harness) scenarioUncontended() error {
	r := &h.rep
	r.heading(2, "Uncontended start: one caller, a free slot, the command is `true`")
	root := h.path("roots", "uncontended")
	if err := h.initRoot(root, 4); err != nil {
		return err
	}
	ok := []int{0}
	crew := contender{name: "crew", what: "crew --root R start t -- true",
		run: h.execRunner(h.env, ok, h.crew, "--root", root, "start", "t", "--", "true")}

	type comparison struct {
		peer   string
		c      func() (contender, func(), error)
		n      int
		target string
		met    func(crewMed, peerMed time.Duration) bool
	}
	comps := []comparison{
		{peer: "flock", n: h.cfg.n(200, 40), target: "crew ÷ flock ≤ 2.5",
			met: func(c, p time.Duration) bool { return ratio(c, p) <= 2.5 },
			c: func() (contender, func(), error) {
				p := h.peers["flock"]
				lock := h.path("tmp", "uncontended.flock")
				return contender{name: "flock", what: "flock FILE true", run: h.execRunner(h.env, ok, p.bin, lock, "true")}, nil, nil
			}},
		{peer: "sem", n: h.cfg.n(30, 8), target: "sem ÷ crew ≥ 20 (crew ≥ 20x faster)",
			met: func(c, p time.Duration) bool { return ratio(p, c) >= 20 },
			c: func() (contender, func(), error) {
				p := h.peers["sem"]
				return contender{name: "sem", what: "sem --will-cite --fg -j 4 --id x true",
					run: h.execRunner(h.env, ok, p.bin, "--will-cite", "--fg", "-j", "4", "--id", "x", "true")}, nil, nil
			}},
		{peer: "tsp", n: h.cfg.n(200, 40), target: "none (context)",
			c: func() (contender, func(), error) {
				p := h.peers["tsp"]
				env, stop, err := h.tspServer("uncontended", 4)
				if err != nil {
					return contender{}, nil, err
				}
				return contender{name: "tsp", what: "tsp -f -n true (server started with tsp -S 4)",
					run: h.execRunner(env, ok, p.bin, "-f", "-n", "true")}, stop, nil
			}},
		{peer: "nq", n: h.cfg.n(200, 40), target: "none (context)",
			c: func() (contender, func(), error) {
				nqdir := h.path("tmp", "nq-uncontended")
				if err := os.MkdirAll(nqdir, 0o700); err != nil {
					return contender{}, nil, err
				}
				return contender{name: "nq", what: "nq true; nq -w ID", run: h.nqRunner(nqdir)}, nil, nil
			}},
	}

	var rows [][]string
	for _, cmp := range comps {
		p := h.peers[cmp.peer]
		if p.bin == "" {
			rows = append(rows, []string{"crew vs " + cmp.peer, cmp.peer, "skipped: not installed (`" + p.install + "`)", "", "", "", "", "", "", cmp.target, "skipped"})
			continue
		}
		pc, stop, err := cmp.c()
		if err != nil {
			return err
		}
		ss, err := h.alternate("uncontended", []contender{crew, pc}, cmp.n, 3)
		if stop != nil {
			stop()
		}
		if err != nil {
			return err
		}
		c, q := ss[0], ss[1]
		result := "—"
		if cmp.met != nil {
			met := cmp.met(c.median(), q.median())
			result = metStr(met)
			measured := fmt.Sprintf("crew %s, %s %s: crew ÷ %s = %.2f", ms(c.median()), cmp.peer, ms(q.median()), cmp.peer, ratio(c.median(), q.median()))
			if cmp.peer == "sem" {
				measured = fmt.Sprintf("crew %s, sem %s: sem ÷ crew = %.1f", ms(c.median()), ms(q.median()), ratio(q.median(), c.median()))
			}
			h.target(fmt.Sprintf("uncontended start, crew vs %s", cmp.peer), measured, cmp.target, met)
		}
		rows = append(rows,
			[]string{"crew vs " + cmp.peer, "crew", "`" + c.what + "`", fmt.Sprint(len(c.samples)), ms(c.median()), ms(c.p90()), ms(c.cpuMedian()),
				"", "", "", ""},
			[]string{"", cmp.peer, "`" + q.what + "`", fmt.Sprint(len(q.samples)), ms(q.median()), ms(q.p90()), ms(q.cpuMedian()),
				fmt.Sprintf("%.2f", ratio(c.median(), q.median())), fmt.Sprintf("%.2f", pairedRatio(c, q)), cmp.target, result})
	}
	r.table([]string{"comparison", "tool", "command", "runs", "median", "p90", "CPU median", "crew ÷ tool (medians)", "crew ÷ tool (paired median)", "target", "result"}, rows)
	r.para("Wall time is from fork to reaped exit of the process the user runs; CPU is user + system time charged to it and the children it waited for (n/a for nq, whose job runs in a detached process). \"Paired\" is the median over rounds of the ratio within a round (the two ran back to back), a check on the ratio of medians on a shared machine.")
	var docs []string
	for _, name := range append([]string{"crew"}, peerOrder...) {
		if name == "crew" || h.peers[name].bin != "" {
			docs = append(docs, "- **"+name+"**: "+peerDoc[name])
		}
	}
	r.para("What each command does:\n\n" + strings.Join(docs, "\n"))
	return nil
}

// nqRunner enqueues `true` with nq and waits for it with nq -w: nq
// detaches the job, so both processes are needed to see it finish.
func (h *harness) nqRunner(nqdir string) func() (sample, error) {
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

// ---------------------------------------------------------------------------
// History: admission and status with 100,000 finished runs.

func (h *harness) scenarioHistory() error {
	r := &h.rep
	n := h.cfg.history
	r.heading(2, fmt.Sprintf("History: admission and `crew status` with %d finished runs", n))
	doneT := h.sample.done
	now := time.Now()
	// The worst case for status: every run in the shard it reads first,
	// the current hour's (crew shards finished runs by creation hour).
	hourStart := now.UTC().Truncate(time.Hour)
	span := now.Sub(hourStart)
	if span < time.Duration(n)*time.Microsecond {
		span = time.Duration(n) * time.Microsecond // just after the hour: keep ids distinct, spill back
	}
	layouts := []struct {
		name, desc string
		times      func(i int) time.Time
	}{
		{"one-hour", fmt.Sprintf("all %d in the current hour's shard directory (the one crew writes into, and the first `status` reads)", n),
			func(i int) time.Time { return now.Add(-time.Duration(i+1) * (span / time.Duration(n+1))) }},
		{"spread", fmt.Sprintf("spread evenly over the last 100 days (%d per day, %d per hour shard)", n/100, n/2400),
			func(i int) time.Time { return now.Add(-time.Duration(i+1) * (100 * 24 * time.Hour / time.Duration(n))) }},
	}
	empty := h.path("roots", "history-none")
	if err := h.initRoot(empty, 4); err != nil {
		return err
	}
	roots := []string{empty}
	var genRows [][]string
	for _, l := range layouts {
		root := h.path("roots", "history-"+l.name)
		if err := h.initRoot(root, 4); err != nil {
			return err
		}
		h.progress("history: writing %d finished records (%s)", n, l.name)
		start := time.Now()
		if err := writeHistory(root, doneT, n, l.times); err != nil {
			return err
		}
		took := time.Since(start)
		got := countFiles(doneDir(root))
		days, _ := os.ReadDir(doneDir(root))
		genRows = append(genRows, []string{l.name, l.desc, fmt.Sprint(got), fmt.Sprint(len(days)), took.Round(10 * time.Millisecond).String()})
		// crew must read what we wrote as its own: no problems, ten
		// finished runs listed.
		out, err := output(h.env, h.crew, "--root", root, "status", "--json")
		if err != nil {
			return err
		}
		var snap struct {
			Finished []json.RawMessage `json:"finished"`
			Problems []json.RawMessage `json:"problems"`
		}
		if err := json.Unmarshal([]byte(out), &snap); err != nil {
			return fmt.Errorf("crew status --json: %w", err)
		}
		if len(snap.Problems) > 0 || len(snap.Finished) != 10 {
			return fmt.Errorf("crew does not read the generated history in %s as its own: %d finished listed, problems: %s", root, len(snap.Finished), tail([]byte(out), 400))
		}
		roots = append(roots, root)
	}
	r.para(fmt.Sprintf("History is written by the harness, not by %d crew runs: each file is a copy of a finished record crew wrote (`%s`), with a new run id (`r-YYYYMMDDTHHMMSS.NNNNNNNNNZ-<16 hex>`), task and times, rendered byte for byte as crew renders it (checked), in `runs/done/<the id's UTC day>/`. `crew status --json` on each root lists 10 finished runs and no problems, so crew reads them as its own.", n, filepath.Base(doneT.path)))
	r.table([]string{"layout", "history", "files", "shard directories", "written in"}, genRows)

	ok := []int{0}
	names := []string{"none", "one-hour", "spread"}
	var adm []contender
	for i, root := range roots {
		adm = append(adm, contender{name: names[i], what: "crew --root R start t -- true",
			run: h.execRunner(h.env, ok, h.crew, "--root", root, "start", "t", "--", "true")})
	}
	ss, err := h.alternate("admission vs history", adm, h.cfg.n(100, 30), 3)
	if err != nil {
		return err
	}
	var rows [][]string
	for i, s := range ss {
		rat, pr, res, tgt := "1.00", "1.00", "", "baseline"
		if i > 0 {
			rt := ratio(s.median(), ss[0].median())
			rat, pr = fmt.Sprintf("%.2f", rt), fmt.Sprintf("%.2f", pairedRatio(s, ss[0]))
			tgt = "≤ 1.2"
			res = metStr(rt <= 1.2)
			h.target(fmt.Sprintf("admission with %d finished runs (%s) vs none", n, names[i]),
				fmt.Sprintf("%s vs %s: ratio %s", ms(s.median()), ms(ss[0].median()), rat), "ratio ≤ 1.2", rt <= 1.2)
		}
		hist := "0"
		if i > 0 {
			hist = fmt.Sprintf("%d (%s)", n, names[i])
		}
		rows = append(rows, []string{hist, "`" + s.what + "`", fmt.Sprint(len(s.samples)), ms(s.median()), ms(s.p90()), ms(s.cpuMedian()), rat, pr, tgt, res})
	}
	r.heading(3, "Admission (`crew start t -- true`, end to end) with and without history")
	r.table([]string{"finished runs in the root", "command", "runs", "median", "p90", "CPU median", "÷ none (medians)", "÷ none (paired)", "target", "result"}, rows)

	var st []contender
	for i, root := range roots {
		st = append(st, contender{name: names[i], what: "crew --root R status",
			run: h.execRunner(h.env, ok, h.crew, "--root", root, "status")})
	}
	ss, err = h.alternate("status vs history", st, h.cfg.n(30, 10), 2)
	if err != nil {
		return err
	}
	rows = nil
	for i, s := range ss {
		hist, tgt, res := "0", "", ""
		if i > 0 {
			hist = fmt.Sprintf("%d (%s)", n, names[i])
			tgt = "≤ 100 ms"
			met := s.median() <= 100*time.Millisecond
			res = metStr(met)
			h.target(fmt.Sprintf("crew status with %d finished runs (%s)", n, names[i]), ms(s.median())+" median, "+ms(s.p90())+" p90", "≤ 100 ms", met)
		}
		rows = append(rows, []string{hist, "`" + s.what + "`", fmt.Sprint(len(s.samples)), ms(s.median()), ms(s.p90()), ms(s.cpuMedian()), tgt, res})
	}
	r.heading(3, "`crew status` with and without history")
	r.table([]string{"finished runs in the root", "command", "runs", "median", "p90", "CPU median", "target", "result"}, rows)
	r.para("Page cache warm (the history was just written); `status` lists the 10 most recent finished runs, so it reads the newest hour shard's names and 10 records.")
	if n != 100000 {
		r.note(fmt.Sprintf("This run used %d finished runs, not the 100,000 of the targets.", n))
	}
	// The history roots are large; free the disk before the next scenario.
	for _, root := range roots[1:] {
		_ = os.RemoveAll(root)
	}
	return nil
}

// ---------------------------------------------------------------------------
// crew recover over dead runs.

func (h *harness) scenarioRecover() error {
	r := &h.rep
	n := h.cfg.dead
	small := min(n, h.cfg.n(1000, 500))
	r.heading(2, fmt.Sprintf("`crew recover` over %d dead runs", n))
	limit := h.cfg.recoverLimit
	if limit <= 0 {
		limit = 24 * time.Hour
	}
	type pass struct {
		size, reps int
		limit      time.Duration
	}
	passes := []pass{{size: n, reps: 1, limit: limit}}
	if small < n {
		// A smaller size, repeated, shows how the cost per run grows.
		passes = []pass{{size: small, reps: h.cfg.n(3, 1), limit: 24 * time.Hour}, {size: n, reps: 1, limit: limit}}
	}
	var rows [][]string
	perRun := map[int]time.Duration{}
	var fullWall time.Duration
	fullDone, fullCut := 0, false
	for _, p := range passes {
		var walls []time.Duration
		for rep := range p.reps {
			res, err := h.recoverOnce(p.size, rep, p.limit)
			if err != nil {
				return err
			}
			walls = append(walls, res.wall)
			per := res.wall / time.Duration(max(1, res.finalized))
			note := fmt.Sprintf("%d active left, %d finished records", res.left, res.done)
			if res.cut {
				note = fmt.Sprintf("**stopped by `--timeout %s`**: %d of %d finalized; ", p.limit, res.finalized, p.size) + note
			}
			rows = append(rows, []string{fmt.Sprint(p.size), fmt.Sprint(rep + 1), res.wall.Round(time.Millisecond).String(), res.cpu.Round(time.Millisecond).String(),
				us(per), res.outcomes, note})
			if p.size == n {
				fullWall, fullDone, fullCut = res.wall, res.finalized, res.cut
			}
		}
		perRun[p.size] = percentile(walls, 50) / time.Duration(p.size)
	}
	r.table([]string{"dead runs", "rep", "wall", "CPU (user+sys)", "wall per finalized run", "outcomes (from --json)", "after"}, rows)

	per := fullWall / time.Duration(max(1, fullDone))
	var measured string
	var met bool
	switch {
	case fullCut:
		measured = fmt.Sprintf("not done within %s: %d of %d finalized (%s per run)", limit, fullDone, n, us(per))
	case n == 10000:
		measured = fmt.Sprintf("%s (%s per run)", fullWall.Round(time.Millisecond), us(per))
		met = fullWall <= 10*time.Second
	default:
		measured = fmt.Sprintf("%s for %d runs (%s per run); 10,000 not measured", fullWall.Round(time.Millisecond), n, us(per))
		met = per*10000 <= 10*time.Second
	}
	r.para(fmt.Sprintf("%d dead runs: %s. Target ≤ 10 s for 10,000: %s.", n, measured, metStr(met)))
	if s, ok := perRun[small]; ok && small < n {
		r.para(fmt.Sprintf("Cost per run: %s at %d dead runs, %s at %d (%.2fx). A linear pass costs the same per run at any size; a quadratic one (a directory listing per run) shows here first.",
			us(s), small, us(per), n, ratio(per, s)))
	}
	r.para(fmt.Sprintf("Each dead run is an active record in state `running` (a copy of the record crew wrote for `crew start layout-active -- sleep 5` while it ran, with a new run id, task and times) plus a copy of every other file that live run had (%s), locks held by nobody: what a supervisor and command killed with SIGKILL leave behind. The command is `crew --root R recover --json --timeout D`; every run must come out `finalized`, leaving no active record. The %d-run pass is bounded by `--timeout %s` (harness flag `-recover-limit`; 0 lets it run to the end) to keep the whole harness run short.", companionNames(h.sample.companions), n, limit))
	h.target(fmt.Sprintf("crew recover over %d dead runs", n), measured, "≤ 10 s for 10,000", met)
	return nil
}

type recoverResult struct {
	wall, cpu             time.Duration
	finalized, left, done int
	cut                   bool
	outcomes              string
}

// recoverOnce writes n dead runs into a fresh root and times one
// `crew recover` over them.
func (h *harness) recoverOnce(n, rep int, limit time.Duration) (*recoverResult, error) {
	root := h.path("roots", fmt.Sprintf("recover-%d-%d", n, rep))
	defer os.RemoveAll(root)
	if err := h.initRoot(root, 4); err != nil {
		return nil, err
	}
	h.progress("recover: writing %d dead runs (rep %d)", n, rep+1)
	if err := writeDead(root, h.sample, n); err != nil {
		return nil, err
	}
	if got := countFiles(activeDir(root)); got != n {
		return nil, fmt.Errorf("expected %d active records, found %d", n, got)
	}
	outPath := h.path("tmp", fmt.Sprintf("recover-%d-%d.json", n, rep))
	outFile, err := os.Create(outPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(h.crew, "--root", root, "recover", "--json", "--timeout", limit.String())
	cmd.Env, cmd.Stdout = h.env, outFile
	h.progress("recover: crew recover over %d dead runs (limit %s)", n, limit)
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	outFile.Close()
	if err != nil && cmd.ProcessState == nil {
		return nil, fmt.Errorf("crew recover: %w", err)
	}
	b, _ := os.ReadFile(outPath)
	var rpt struct {
		Items []struct {
			Outcome string `json:"outcome"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &rpt); err != nil {
		return nil, fmt.Errorf("crew recover --json (exit %d): %w: %s", cmd.ProcessState.ExitCode(), err, tail(b, 300))
	}
	counts := map[string]int{}
	for _, it := range rpt.Items {
		counts[it.Outcome]++
	}
	res := &recoverResult{wall: wall, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(),
		finalized: counts["finalized"],
		left:      countFiles(activeDir(root)),
		done:      countFiles(doneDir(root))}
	res.cut = cmd.ProcessState.ExitCode() == 1 && counts["failed"] > 0 && wall >= limit-time.Second
	if !res.cut && (cmd.ProcessState.ExitCode() != 0 || res.finalized != n || res.left != 0 || res.done != n) {
		return nil, fmt.Errorf("recover did not finalize every dead run: exit %d, outcomes %v, %d active left, %d finished records",
			cmd.ProcessState.ExitCode(), counts, res.left, res.done)
	}
	var oc []string
	for k, v := range counts {
		oc = append(oc, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(oc)
	res.outcomes = strings.Join(oc, ", ")
	return res, nil
}

// ---------------------------------------------------------------------------
// Peak RSS.

func (h *harness) scenarioRSS() error {
	r := &h.rep
	r.heading(2, "Peak memory of a supervising `crew start t -- sleep 1`")
	root := h.path("roots", "rss")
	if err := h.initRoot(root, 4); err != nil {
		return err
	}
	type tool struct {
		name, what string
		args       []string
		env        []string
		stop       func()
	}
	tools := []tool{{name: "crew", what: "crew --root R start t -- sleep 1", args: []string{h.crew, "--root", root, "start", "t", "--", "sleep", "1"}, env: h.env}}
	if p := h.peers["flock"]; p.bin != "" {
		tools = append(tools, tool{name: "flock", what: "flock FILE sleep 1", args: []string{p.bin, h.path("tmp", "rss.flock"), "sleep", "1"}, env: h.env})
	}
	if p := h.peers["sem"]; p.bin != "" {
		tools = append(tools, tool{name: "sem", what: "sem --will-cite --fg -j 4 --id rss sleep 1", args: []string{p.bin, "--will-cite", "--fg", "-j", "4", "--id", "rss", "sleep", "1"}, env: h.env})
	}
	if p := h.peers["tsp"]; p.bin != "" {
		env, stop, err := h.tspServer("rss", 4)
		if err != nil {
			return err
		}
		tools = append(tools, tool{name: "tsp", what: "tsp -f -n sleep 1 (the client process; the server is separate)", args: []string{p.bin, "-f", "-n", "sleep", "1"}, env: env, stop: stop})
	}
	defer func() {
		for _, t := range tools {
			if t.stop != nil {
				t.stop()
			}
		}
	}()
	reps := h.cfg.n(4, 2)
	gnuTime := findGNUTime(h.env)
	got := make([][]memSample, len(tools))
	h.progress("rss: %d rounds of %d tools, 1 s each", reps, len(tools))
	for range reps {
		for i, t := range tools {
			m, err := h.peakRSS(t.env, t.args, gnuTime)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			got[i] = append(got[i], m)
		}
	}
	const limit = 8 << 20
	var rows [][]string
	for i, t := range tools {
		col := func(f func(memSample) int64) []int64 {
			var out []int64
			for _, m := range got[i] {
				out = append(out, f(m))
			}
			return out
		}
		hwm, life := col(func(m memSample) int64 { return m.hwm }), col(func(m memSample) int64 { return m.life })
		tgt, res := "", ""
		if t.name == "crew" {
			worst := max(slices.Max(hwm), slices.Max(life))
			med := max(medianInt(hwm), medianInt(life))
			tgt = "≤ 8 MiB"
			res = metStr(worst <= limit)
			h.target("peak RSS of a supervising crew start", fmt.Sprintf("%s median, %s worst (VmHWM and GNU time maxrss)", mib(med), mib(worst)), "≤ 8 MiB", worst <= limit)
		}
		rows = append(rows, []string{t.name, "`" + t.what + "`", fmt.Sprint(reps), mib(medianInt(hwm)), mib(slices.Max(hwm)),
			mib(medianInt(col(func(m memSample) int64 { return m.anon }))), mib(medianInt(col(func(m memSample) int64 { return m.file }))),
			mib(medianInt(life)), mib(slices.Max(life)), tgt, res})
	}
	r.table([]string{"tool", "command", "runs", "VmHWM median", "VmHWM worst", "RssAnon", "RssFile", "whole-life maxrss median", "worst", "target", "result"}, rows)
	lifeNote := "GNU time is not installed (`apt-get install -y time`), so there is no whole-life figure."
	if gnuTime != "" {
		lifeNote = "The whole-life maxrss is the kernel's own peak for the process, from wait4(2) as reported by GNU time (`" + gnuTime + " -f %M`), which starts the tool with fork(2). It is not taken from the harness's own wait4: Go starts children with CLONE_VM|CLONE_VFORK, and the kernel charges the parent's (the harness's) peak RSS to the child's maxrss when it execs, so a Go-started child's ru_maxrss is the harness's size, whatever the child does."
	}
	r.para("VmHWM (peak), RssAnon and RssFile come from `/proc/<pid>/status` of the process the user started, read every 10 ms until it exits (last reading shown for RssAnon/RssFile). " + lifeNote + " RssFile is mostly the executable's own pages, shared with every other process running the same binary. The target is checked against the worst run of either measure.")
	r.note("Peak RSS of a *waiting* crew is in the queue section.")
	return nil
}

// memSample is the memory of one process: its peak and makeup from
// /proc, and its whole-life maxrss from GNU time (-1 when unknown).
type memSample struct{ hwm, anon, file, life int64 }

// findGNUTime returns the path of GNU time(1), or "".
func findGNUTime(env []string) string {
	for _, p := range []string{"/usr/bin/time", "/bin/time"} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if out, _ := quickOutput(env, p, "--version"); strings.Contains(out, "GNU") {
			return p
		}
	}
	return ""
}

// peakRSS runs args (under GNU time when given) and samples the memory
// of the process args[0] until it exits.
func (h *harness) peakRSS(env []string, args []string, gnuTime string) (memSample, error) {
	m := memSample{hwm: -1, anon: -1, file: -1, life: -1}
	argv := args
	lifeFile := h.path("tmp", fmt.Sprintf("maxrss-%d.txt", h.seq()))
	if gnuTime != "" {
		argv = append([]string{gnuTime, "-f", "%M", "-o", lifeFile}, args...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		return m, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	pid := cmd.Process.Pid
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	target := 0
	if gnuTime == "" {
		target = pid
	}
	for {
		select {
		case err := <-done:
			if err != nil {
				return m, err
			}
			if gnuTime != "" {
				b, _ := os.ReadFile(lifeFile)
				var kb int64
				if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &kb); err == nil {
					m.life = kb << 10
				}
			}
			return m, nil
		case <-tick.C:
			if target == 0 { // the tool is GNU time's child
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
				if f := strings.Fields(string(b)); len(f) > 0 {
					fmt.Sscanf(f[0], "%d", &target)
				}
				if target == 0 {
					continue
				}
			}
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", target))
			if err != nil {
				continue
			}
			if hwm := procKB(st, "VmHWM"); hwm > 0 {
				m.hwm = max(m.hwm, hwm)
				m.anon, m.file = procKB(st, "RssAnon"), procKB(st, "RssFile")
			}
		}
	}
}

// procKB reads a "Key:   123 kB" line of /proc/<pid>/status, in bytes, or
// -1 when absent (not Linux, or the process already exited).
func procKB(status []byte, key string) int64 {
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != key {
			continue
		}
		var n int64
		if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &n); err == nil {
			return n << 10
		}
	}
	return -1
}

func medianInt(xs []int64) int64 {
	if len(xs) == 0 {
		return -1
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func mib(b int64) string {
	if b < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
}
