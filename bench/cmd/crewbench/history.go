package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// History: admission and `crew status` with 100,000 finished runs (-quick:
// 10,000), all created in the current hour or spread over 100 days, vs a
// root with none. The history is written by the harness (fixtures.go).

type historyLayout struct {
	name, desc string
	times      func(i int) time.Time
}

func (h historyScenario) scenarioHistory() error {
	n := h.cfg.history
	h.rep.heading(2, fmt.Sprintf("History: admission and `crew status` with %d finished runs", n))
	roots, err := h.historyRoots(n)
	// The history roots are large; free the disk before the next scenario.
	defer func() {
		for _, root := range roots[1:] {
			_ = os.RemoveAll(root)
		}
	}()
	if err != nil {
		return err
	}
	if err := h.historyAdmission(roots, n); err != nil {
		return err
	}
	status, err := h.historyStatus(roots, n)
	if err != nil {
		return err
	}
	list, err := h.historyList(roots, n)
	if err != nil {
		return err
	}
	met := status.median() <= 10*time.Millisecond && list.median() <= 10*time.Millisecond
	h.measured(figStatusHistory, fmt.Sprintf("**%s** / **%s** (%d runs)", ms(status.median()), ms(list.median()), n),
		fmt.Sprintf("p10–p90 %s / %s", status.spread(), list.spread()), met)
	if n != 100000 {
		h.rep.note(fmt.Sprintf("This run used %d finished runs, not the 100,000 of the figures.", n))
	}
	return nil
}

var historyNames = []string{"none", "one-hour", "spread"}

func historyLayouts(n int) []historyLayout {
	now := time.Now()
	// The worst case for status: every run in the shard it reads first,
	// the current hour's.
	span := now.Sub(now.UTC().Truncate(time.Hour))
	if span < time.Duration(n)*time.Microsecond {
		span = time.Duration(n) * time.Microsecond // just after the hour: keep ids distinct, spill back
	}
	return []historyLayout{
		{historyNames[1], fmt.Sprintf("all %d in the current hour's shard directory (the one crew writes into, and the first `status` reads)", n),
			func(i int) time.Time { return now.Add(-time.Duration(i+1) * (span / time.Duration(n+1))) }},
		{historyNames[2], fmt.Sprintf("spread evenly over the last 100 days (%d per day, %d per hour shard)", n/100, n/2400),
			func(i int) time.Time { return now.Add(-time.Duration(i+1) * (100 * 24 * time.Hour / time.Duration(n))) }},
	}
}

// historyRoots makes an empty root and one per layout, and checks that
// crew reads the written history as its own.
func (h historyScenario) historyRoots(n int) ([]string, error) {
	roots := []string{h.path("roots", "history-none")}
	if err := h.initRoot(roots[0], 4); err != nil {
		return roots, err
	}
	var rows [][]string
	for _, l := range historyLayouts(n) {
		root := h.path("roots", "history-"+l.name)
		roots = append(roots, root)
		if err := h.initRoot(root, 4); err != nil {
			return roots, err
		}
		h.progress("history: writing %d finished records (%s)", n, l.name)
		start := time.Now()
		if err := writeHistory(root, h.sample.done, n, l.times); err != nil {
			return roots, err
		}
		if err := h.indexHistory(root); err != nil {
			return roots, err
		}
		took := time.Since(start)
		shards, _ := os.ReadDir(doneDir(root))
		rows = append(rows, []string{l.name, l.desc, fmt.Sprint(countFiles(doneDir(root))), fmt.Sprint(len(shards)), took.Round(10 * time.Millisecond).String()})
		if err := h.readsAsOwn(root); err != nil {
			return roots, err
		}
	}
	h.rep.para(fmt.Sprintf("History is written by the harness, not by %d crew runs: each file is a copy of a finished record crew wrote (`%s`), with a new run id (`%s`), task and times, rendered byte for byte as crew renders it (checked), at `%s`; then `crew recover` indexes them (crew's index of finished runs lists what crew finished, or indexed), as after copying a history in by hand (\"written in\" includes it). `crew status --json` on each root lists 10 finished runs and no problems, so crew reads them as its own.",
		n, filepath.Base(h.sample.done.path), runIDDoc, doneLayoutDoc))
	h.rep.table([]string{"layout", "history", "files", "shard directories", "written in"}, rows)
	return roots, nil
}

// readsAsOwn checks that crew status lists ten finished runs of root and
// reports no problem.
func (h historyScenario) readsAsOwn(root string) error {
	s, err := h.status(root)
	if err != nil {
		return err
	}
	if len(s.Problems) > 0 || len(s.Finished) != 10 {
		return fmt.Errorf("crew does not read the generated history in %s as its own: %d finished runs listed, %d problems", root, len(s.Finished), len(s.Problems))
	}
	return nil
}

// historyAdmission times `crew start t -- true` in the three roots,
// alternating.
func (h historyScenario) historyAdmission(roots []string, n int) error {
	ok := []int{0}
	var cs []contender
	for i, root := range roots {
		cs = append(cs, contender{name: historyNames[i], what: "crew --root R start t -- true",
			run: h.execRunner(h.env, ok, h.crew, "--root", root, "start", "t", "--", "true")})
	}
	ss, err := h.alternate("admission vs history", cs, h.cfg.n(100, 30), 3)
	if err != nil {
		return err
	}
	rows := [][]string{seriesRow("0", ss[0], "1.00", "baseline", "")}
	worst, worstAt := 0.0, 0
	for i, s := range ss[1:] {
		rt := ratio(s.median(), ss[0].median())
		if rt > worst {
			worst, worstAt = rt, i+1
		}
		rows = append(rows, seriesRow(fmt.Sprintf("%d (%s)", n, s.name), s, fmt.Sprintf("%.2f", rt), "≤ 1.2", metStr(rt <= 1.2)))
	}
	h.rep.heading(3, "Admission (`crew start t -- true`, end to end) with and without history")
	h.rep.table([]string{"finished runs in the root", "command", "runs", "median", "p10–p90", "CPU median", "÷ none (medians)", "goal", "result"}, rows)
	w := ss[worstAt]
	h.measured(figHistory, fmt.Sprintf("%s ÷ %s = **%.2f×** (%d runs, %s, the worse layout)", ms(w.median()), ms(ss[0].median()), worst, n, w.name),
		ratioSpread(w, ss[0]), worst <= 1.2)
	return nil
}

// historyStatus times `crew status` in the three roots, alternating; it
// returns the series of the history spread over 100 days.
func (h historyScenario) historyStatus(roots []string, n int) (*series, error) {
	ok := []int{0}
	var cs []contender
	for i, root := range roots {
		cs = append(cs, contender{name: historyNames[i], what: "crew --root R status",
			run: h.execRunner(h.env, ok, h.crew, "--root", root, "status")})
	}
	ss, err := h.alternate("status vs history", cs, h.cfg.n(30, 10), 2)
	if err != nil {
		return nil, err
	}
	rows := [][]string{seriesRow("0", ss[0], "", "")}
	for _, s := range ss[1:] {
		met := s.median() <= 50*time.Millisecond
		rows = append(rows, seriesRow(fmt.Sprintf("%d (%s)", n, s.name), s, "≤ 50 ms", metStr(met)))
		if s.name == "one-hour" {
			h.measured(figStatusHour, fmt.Sprintf("**%s** (%d runs)", ms(s.median()), n), "p10–p90 "+s.spread(), met)
		} else {
			h.target(fmt.Sprintf("crew status with %d finished runs (%s)", n, s.name), ms(s.median())+" median, p10–p90 "+s.spread(), "≤ 50 ms", met)
		}
	}
	h.rep.heading(3, "`crew status` with and without history")
	h.rep.table([]string{"finished runs in the root", "command", "runs", "median", "p10–p90", "CPU median", "goal", "result"}, rows)
	h.rep.para("Page cache warm (the history was just written); `status` lists the 10 newest finishes: it reads the newest entries of the index of finished runs (`runs/finished.idx`) and those 10 records, whatever the history.")
	return ss[2], nil
}

// historyList times `crew history --limit 20` in the three roots,
// alternating; it returns the series of the history spread over 100 days.
func (h historyScenario) historyList(roots []string, n int) (*series, error) {
	ok := []int{0}
	var cs []contender
	for i, root := range roots {
		cs = append(cs, contender{name: historyNames[i], what: "crew --root R history --limit 20",
			run: h.execRunner(h.env, ok, h.crew, "--root", root, "history", "--limit", "20")})
	}
	ss, err := h.alternate("history --limit 20 vs history", cs, h.cfg.n(30, 10), 2)
	if err != nil {
		return nil, err
	}
	rows := [][]string{seriesRow("0", ss[0], "")}
	for _, s := range ss[1:] {
		goal := ""
		if s.name == "spread" {
			goal = "≤ 10 ms"
		}
		rows = append(rows, seriesRow(fmt.Sprintf("%d (%s)", n, s.name), s, goal))
	}
	h.rep.heading(3, "`crew history --limit 20` with and without history")
	h.rep.table([]string{"finished runs in the root", "command", "runs", "median", "p10–p90", "CPU median", "goal"}, rows)
	return ss[2], nil
}

// seriesRow is a table row for one series: label, command, runs, median,
// spread, CPU, then the extra columns.
func seriesRow(label string, s *series, extra ...string) []string {
	return append([]string{label, "`" + s.what + "`", fmt.Sprint(len(s.samples)), ms(s.median()), s.spread(), ms(s.cpuMedian())}, extra...)
}
