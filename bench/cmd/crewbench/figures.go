package main

import (
	"fmt"
	"strings"
)

// The figures of the performance issue (#25), in its order, with its
// goals; then the peers (tsp, nq, sem) as context, and the figures of the
// retired issue #11 that cost nothing extra to keep. Each scenario fills
// the ones it measures; the report ends with all of them side by side,
// including those not measured in this run and why.

type figureID int

const (
	// issue 25
	figDurableDisk figureID = iota
	figCobraTmpfs
	figCPU
	figFiles
	figSyscalls
	figConcurrentTmpfs
	figConcurrent
	figKill
	figMakespan
	figHandoff
	figIdleWake
	figIdleMem
	figStatusHistory
	// context: the peers
	figVsTsp
	figVsNq
	figVsSem
	// retired with issue #11, kept because they are measured anyway
	figTmpfs
	figDisk
	figActive
	figStatusHour
	figRSS
	figHistory
	figRecover
	numFigures
)

// figureKind says which table of the summary a figure belongs to.
type figureKind int

const (
	kindIssue   figureKind = iota // a figure of issue 25, with a goal
	kindContext                   // a peer, measured as context, no goal
	kindRetired                   // a figure of the retired issue #11
)

type figure struct {
	what, goal string
	scenario   string // the -only name that measures it
	kind       figureKind
	measured   string // the median (or percentile) and the ratio
	spread     string
	result     string // met, not met, context, or why it was not measured
}

func issueFigures() []figure {
	f := make([]figure, numFigures)
	f[figDurableDisk] = figure{what: "`crew start t -- true` ÷ durable floor (`floor-durable`), both on the work directory's disk", goal: "≤ 1.3×", scenario: "uncontended"}
	f[figCobraTmpfs] = figure{what: "`crew start t -- true`, state root on tmpfs ÷ `floor-cobra`", goal: "≤ 1.3×", scenario: "uncontended"}
	f[figCPU] = figure{what: "CPU per start (user + system from wait4, disk root) ÷ `floor-cobra`'s", goal: "≤ 1.3×", scenario: "uncontended"}
	f[figFiles] = figure{what: "per run: files created / inodes freed (with data) / fsyncs", goal: "≤ 2 / 0 with data / ≤ 3", scenario: "diag"}
	f[figSyscalls] = figure{what: "syscalls per start (`strace -f -c`)", goal: "≤ 500", scenario: "diag"}
	f[figConcurrentTmpfs] = figure{what: "32 concurrent starters × 4 rounds ÷ same load on `flock F true`, tmpfs", goal: "≤ 2.0×", scenario: "concurrent"}
	f[figConcurrent] = figure{what: "same, on the work directory's disk", goal: "≤ 2.0×", scenario: "concurrent"}
	f[figKill] = figure{what: "next waiter's command starts after the holder (command and supervisor) is SIGKILLed", goal: "p99 ≤ 50 ms", scenario: "kill"}
	f[figMakespan] = figure{what: "64 `--wait` starts of `sleep 0.2` at cap 4: makespan ÷ 3.2 s", goal: "≤ 1.05×", scenario: "queue"}
	f[figHandoff] = figure{what: "queue handoff p50 / p99, 32 waiters (p99 includes the burst while waiters join)", goal: "≤ 5 / ≤ 25 ms", scenario: "queue"}
	f[figIdleWake] = figure{what: "64 idle waiters: wake-ups (context switches) and CPU while nothing changes", goal: "0 wake-ups", scenario: "queue"}
	f[figIdleMem] = figure{what: "64 idle waiters: memory (sum of RssAnon)", goal: "≤ 32 MiB", scenario: "queue"}
	f[figStatusHistory] = figure{what: "`status` / `history --limit 20`, 100,000 finished runs over 100 days", goal: "≤ 10 ms each", scenario: "history"}
	ctx := func(what string) figure {
		return figure{what: what, goal: "context", scenario: "uncontended", kind: kindContext}
	}
	f[figVsTsp] = ctx("`crew start` (disk) ÷ `tsp -f -n`")
	f[figVsNq] = ctx("`crew start` (disk) ÷ `nq` + `nq -w`")
	f[figVsSem] = ctx("`crew start` (disk) ÷ `sem --fg`")
	retired := func(what, goal, scenario string) figure {
		return figure{what: what, goal: goal, scenario: scenario, kind: kindRetired}
	}
	f[figTmpfs] = retired("`crew start t -- true` ÷ `flock F true`, tmpfs", "≤ 2.0×", "uncontended")
	f[figDisk] = retired("same, on the work directory's disk", "≤ 3.0×", "uncontended")
	f[figActive] = retired("start with 200 active runs ÷ with 1", "≤ 1.3×", "active")
	f[figStatusHour] = retired("`crew status` with 100,000 finished runs created in one hour", "≤ 50 ms", "history")
	f[figRSS] = retired("peak RSS of `crew start`", "≤ 5 MiB", "rss")
	f[figHistory] = retired("admission with 100,000 finished runs ÷ with none", "≤ 1.2×", "history")
	f[figRecover] = retired("`crew recover` of 10,000 dead runs", "≤ 10 s", "recover")
	return f
}

// measured records a figure of this run; a context figure has no goal, so
// met is ignored for it.
func (h *harness) measured(id figureID, measured, spread string, met bool) {
	f := &h.figures[id]
	f.measured, f.spread, f.result = measured, spread, metStr(met)
	if f.kind == kindContext {
		f.result = "context"
	}
}

// annotate adds a note (an anchor measured after the figure) to a
// figure's spread.
func (h *harness) annotate(id figureID, note string) {
	f := &h.figures[id]
	f.spread = strings.TrimPrefix(f.spread+"; "+note, "; ")
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

// reportFigures prints every figure, measured or not: issue 25's with
// their goals, then the context and retired ones.
func (h *harness) reportFigures() {
	var issue, other [][]string
	met, total := 0, 0
	for _, f := range h.figures {
		if f.result == "" {
			f.measured, f.spread = "—", "—"
			f.result = "not measured: scenario `" + f.scenario + "` not selected (-only)"
		}
		if f.kind != kindIssue {
			label := "peer"
			if f.kind == kindRetired {
				label = "retired (#11)"
			}
			other = append(other, []string{label, f.what, f.goal, f.measured, f.spread, f.result})
			continue
		}
		if f.result == metStr(true) {
			met++
		}
		if !strings.HasPrefix(f.result, "not measured") {
			total++
		}
		issue = append(issue, []string{f.what, f.goal, f.measured, f.spread, f.result})
	}
	h.rep.heading(2, "Summary: the figures of the performance issue (#25)")
	h.rep.para(fmt.Sprintf("Measured side by side in this run, each against its anchor in the same alternation; ratios are of medians over alternating runs (A B A B ...). %d of %d measured figures meet their goal.", met, total))
	h.rep.table([]string{"figure", "goal", "measured", "spread", "result"}, issue)
	h.rep.heading(3, "Context: the peers, and the figures of the retired issue #11")
	h.rep.table([]string{"kind", "figure", "goal", "measured", "spread", "result"}, other)
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
