package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// crew recover over dead runs.

// recoverPass is one size of dead-run set, recovered reps times.
type recoverPass struct {
	size, reps int
	limit      time.Duration
}

func (h recoverScenario) scenarioRecover() error {
	n := h.cfg.dead
	small := min(n, h.cfg.n(1000, 500))
	h.rep.heading(2, fmt.Sprintf("`crew recover` over %d dead runs", n))
	limit := h.cfg.recoverLimit
	if limit <= 0 {
		limit = 24 * time.Hour
	}
	passes := []recoverPass{{size: n, reps: 1, limit: limit}}
	if small < n {
		// A smaller size, repeated, shows how the cost per run grows.
		passes = []recoverPass{{size: small, reps: h.cfg.n(3, 1), limit: 24 * time.Hour}, {size: n, reps: 1, limit: limit}}
	}
	perRun := map[int]time.Duration{}
	var full *recoverResult
	var rows [][]string
	for _, p := range passes {
		var walls []time.Duration
		for rep := range p.reps {
			res, err := h.recoverOnce(p.size, rep, p.limit)
			if err != nil {
				return err
			}
			walls = append(walls, res.wall)
			rows = append(rows, res.row(p, rep))
			if p.size == n {
				full = res
			}
		}
		perRun[p.size] = percentile(walls, 50) / time.Duration(p.size)
	}
	h.rep.table([]string{"dead runs", "rep", "wall", "CPU (user+sys)", "wall per finalized run", "outcomes (from --json)", "after"}, rows)
	h.recoverFigure(full, n, limit, small, perRun)
	return nil
}

func (res *recoverResult) row(p recoverPass, rep int) []string {
	per := res.wall / time.Duration(max(1, res.finalized))
	note := fmt.Sprintf("%d active left, %d finished records", res.left, res.done)
	if res.cut {
		note = fmt.Sprintf("**stopped by `--timeout %s`**: %d of %d finalized; ", p.limit, res.finalized, p.size) + note
	}
	return []string{fmt.Sprint(p.size), fmt.Sprint(rep + 1), res.wall.Round(time.Millisecond).String(), res.cpu.Round(time.Millisecond).String(),
		us(per), res.outcomes, note}
}

// recoverFigure judges the full pass against 10 s for 10,000 (scaled by
// the cost per run when -dead is not 10,000).
func (h recoverScenario) recoverFigure(full *recoverResult, n int, limit time.Duration, small int, perRun map[int]time.Duration) {
	per := full.wall / time.Duration(max(1, full.finalized))
	var measured string
	var met bool
	switch {
	case full.cut:
		measured = fmt.Sprintf("not done within %s: %d of %d finalized (%s per run)", limit, full.finalized, n, us(per))
	case n == 10000:
		measured = fmt.Sprintf("%s (%s per run)", full.wall.Round(time.Millisecond), us(per))
		met = full.wall <= 10*time.Second
	default:
		measured = fmt.Sprintf("%s for %d runs (%s per run); 10,000 not measured", full.wall.Round(time.Millisecond), n, us(per))
		met = per*10000 <= 10*time.Second
	}
	h.rep.para(fmt.Sprintf("%d dead runs: %s. Goal ≤ 10 s for 10,000: %s.", n, measured, metStr(met)))
	spread := "one pass"
	if s, ok := perRun[small]; ok && small < n {
		h.rep.para(fmt.Sprintf("Cost per run: %s at %d dead runs, %s at %d (%.2fx). A linear pass costs the same per run at any size; a quadratic one (a directory listing per run) shows here first.",
			us(s), small, us(per), n, ratio(per, s)))
		spread = fmt.Sprintf("one pass; %s per run at %d dead runs (median of %d)", us(s), small, h.cfg.n(3, 1))
	}
	h.rep.para(fmt.Sprintf("Each dead run is an active record in state `running` (a copy of the record crew wrote for `crew start layout-active -- sleep 5` while it ran, with a new run id, task and times) plus a copy of every other file that live run had (%s), locks held by nobody: what a supervisor and command killed with SIGKILL leave behind. The command is `crew --root R recover --json --timeout D`; every run must come out `finalized`, leaving no active record. The %d-run pass is bounded by `--timeout %s` (harness flag `-recover-limit`; 0 lets it run to the end) to keep the whole harness run short.", companionNames(h.sample.companions), n, limit))
	h.measured(figRecover, "**"+measured+"**", spread, met)
}

type recoverResult struct {
	wall, cpu             time.Duration
	finalized, left, done int
	cut                   bool
	outcomes              string
}

// recoverOnce writes n dead runs into a fresh root and times one
// `crew recover` over them.
func (h recoverScenario) recoverOnce(n, rep int, limit time.Duration) (*recoverResult, error) {
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
