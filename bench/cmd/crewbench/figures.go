package main

import (
	"fmt"
	"strings"
)

// The figures of the performance issue (#11), in its order, with its
// goals. Each scenario fills the ones it measures; the report ends with all
// of them side by side, including those not measured in this run and why.

type figureID int

const (
	figTmpfs figureID = iota
	figDisk
	figConcurrent
	figConcurrentTmpfs
	figActive
	figMakespan
	figHandoff
	figStatusHour
	figRSS
	figVsTsp
	figVsNq
	figVsSem
	figHistory
	figRecover
	figIdleWaiters
	numFigures
)

type figure struct {
	what, goal string
	scenario   string // the -only name that measures it
	measured   string // the median (or percentile) and the ratio
	spread     string
	result     string // met, not met, or why it was not measured
}

func issueFigures() []figure {
	f := make([]figure, numFigures)
	f[figTmpfs] = figure{what: "`crew start t -- true` ÷ `flock F true`, state root on tmpfs", goal: "≤ 2.0×", scenario: "uncontended"}
	f[figDisk] = figure{what: "same, state root on the work directory's disk filesystem", goal: "≤ 3.0×", scenario: "uncontended"}
	f[figConcurrent] = figure{what: "32 concurrent starters of distinct tasks × 4 rounds, time ÷ same load on `flock F true`, state root on the work directory's disk filesystem", goal: "≤ 2.0×", scenario: "concurrent"}
	f[figConcurrentTmpfs] = figure{what: "same, state root on tmpfs", goal: "≤ 2.0×", scenario: "concurrent"}
	f[figActive] = figure{what: "start with 200 active runs ÷ start with 1 active run", goal: "≤ 1.3×", scenario: "active"}
	f[figMakespan] = figure{what: "64 `--wait` starts of `sleep 0.2` at cap 4: makespan ÷ ideal 3.2 s", goal: "≤ 1.10×", scenario: "queue"}
	f[figHandoff] = figure{what: "queue handoff latency, 32 waiters", goal: "p50 ≤ 10 ms, p99 ≤ 50 ms", scenario: "queue"}
	f[figStatusHour] = figure{what: "`crew status` with 100,000 finished runs created in one hour", goal: "≤ 50 ms", scenario: "history"}
	f[figRSS] = figure{what: "peak RSS of `crew start`", goal: "≤ 5 MiB", scenario: "rss"}
	f[figVsTsp] = figure{what: "sem / tsp / nq: `crew start` ÷ `tsp -f -n`", goal: "< 1.0× (faster)", scenario: "uncontended"}
	f[figVsNq] = figure{what: "sem / tsp / nq: `crew start` ÷ `nq` + `nq -w`", goal: "< 1.0× (faster)", scenario: "uncontended"}
	f[figVsSem] = figure{what: "sem / tsp / nq: `crew start` ÷ `sem --fg`", goal: "< 1.0× (faster)", scenario: "uncontended"}
	f[figHistory] = figure{what: "keep: admission with 100,000 finished runs ÷ with none", goal: "≤ 1.2×", scenario: "history"}
	f[figRecover] = figure{what: "keep: `crew recover` of 10,000 dead runs", goal: "≤ 10 s", scenario: "recover"}
	f[figIdleWaiters] = figure{what: "keep: 64 idle waiters, CPU", goal: "≤ 2 % of a core", scenario: "queue"}
	return f
}

// measured records a figure of this run.
func (h *harness) measured(id figureID, measured, spread string, met bool) {
	f := &h.figures[id]
	f.measured, f.spread, f.result = measured, spread, metStr(met)
}

// notMeasured records why a figure could not be measured in this run.
func (h *harness) notMeasured(id figureID, why string) {
	f := &h.figures[id]
	f.measured, f.spread, f.result = "—", "—", "not measured: "+why
}

// failFigures marks the figures a failed scenario left unmeasured.
func (h *harness) failFigures(scenario string, err error) {
	for i := range h.figures {
		if f := &h.figures[i]; f.scenario == scenario && f.result == "" {
			h.notMeasured(figureID(i), "scenario failed: "+tail([]byte(err.Error()), 120))
		}
	}
}

// reportFigures prints every figure of the issue, measured or not.
func (h *harness) reportFigures() {
	var rows [][]string
	met, total := 0, 0
	for _, f := range h.figures {
		if f.result == "" {
			f.measured, f.spread = "—", "—"
			f.result = "not measured: scenario `" + f.scenario + "` not selected (-only)"
		}
		if f.result == metStr(true) {
			met++
		}
		if !strings.HasPrefix(f.result, "not measured") {
			total++
		}
		rows = append(rows, []string{f.what, f.goal, f.measured, f.spread, f.result})
	}
	h.rep.heading(2, "Summary: the figures of the performance issue (#11)")
	h.rep.para(fmt.Sprintf("Measured side by side in this run; ratios are of medians over alternating runs (A B A B ...). %d of %d measured figures meet their goal.", met, total))
	h.rep.table([]string{"figure", "goal", "measured", "spread", "result"}, rows)
	if h.cfg.quick {
		h.rep.note("-quick: fewer rounds and a smaller history and dead-run count than the figures name; a smoke run, not for publication.")
	}
}

func metStr(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}
