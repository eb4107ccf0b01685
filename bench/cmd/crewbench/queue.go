package main

import (
	"cmp"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// ---------------------------------------------------------------------------
// QUEUE SCENARIOS (`crew start --wait`).
//
// They need the queue: a `--wait` flag on `crew start`. When
// `crew start --help` does not list it (a build from before the queue
// landed), the section reports them as skipped, with their targets.
// Written against the text and checked against the queue's first
// version (`--wait duration[=forever]`, bare --wait waits without limit):
//
//   - 64 processes, cap 4, each sleeping 0.2 s, with --wait: makespan
//     ≤ 1.05 × the ideal 3.2 s (issue 25)
//   - handoff latency with 32 waiters: p50 ≤ 5 ms, p99 ≤ 25 ms (issue 25)
//   - 64 idle waiters: 0 wake-ups while nothing changes, the sum of their
//     RssAnon ≤ 32 MiB (issue 25; idle.go)
//   - peak RSS of a waiting crew ≤ 8 MiB
//
// The next waiter's start after its holder is SIGKILLed is the kill
// scenario (kill.go).

// waitFlag looks for --wait in `crew start --help` and returns the argument
// to pass: "--wait" for a boolean flag, "--wait=10m" when it takes a
// duration. ok is false when there is no such flag.
func (h queueScenario) waitFlag() (arg string, ok bool, reason string) {
	out, err := output(h.env, h.crew, "start", "--help")
	if err != nil {
		return "", false, "`crew start --help` failed: " + err.Error()
	}
	for _, line := range strings.Split(out, "\n") {
		// Only the flag list: "      --wait duration[=forever]   ..." or
		// "  -w, --wait ...", not examples that mention --wait.
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasSuffix(f[0], ",") && len(f[0]) == 3 {
			f = f[1:]
		}
		if len(f) == 0 || f[0] != "--wait" {
			continue
		}
		if len(f) > 1 {
			switch typ := f[1]; {
			case strings.Contains(typ, "[="):
				return "--wait", true, strings.TrimSpace(line) // optional value: bare --wait waits
			case typ == "duration":
				return "--wait=10m", true, strings.TrimSpace(line)
			case typ == "string" || typ == "int":
				return "", false, "`crew start --wait` takes a " + typ + "; the harness does not know what to pass: " + strings.TrimSpace(line)
			}
		}
		return "--wait", true, strings.TrimSpace(line)
	}
	return "", false, "`crew start --help` has no `--wait` flag yet (the queue issue adds it)"
}

func (h queueScenario) scenarioQueue() error {
	r := &h.rep
	r.heading(2, "Queue: `crew start --wait`")
	wait, ok, why := h.waitFlag()
	if !ok {
		for _, id := range []figureID{figMakespan, figHandoff, figIdleWake, figIdleMem} {
			h.notMeasured(id, "no `--wait` in this crew")
		}
		h.target("peak RSS of a waiting crew", "not measured: no `--wait` yet", "≤ 8 MiB", false)
		r.note("Skipped: " + why + ". These scenarios run automatically once it exists.")
		return nil
	}
	r.para("`crew start --help` has `" + why + "`; the callers pass `" + wait + "`. Commands are `crewbench observe FILE MS` (the observer of the correctness section), so every burst also checks the cap; callers are released together through the same gate, and the makespan runs from the gate opening to the last caller's exit.")
	for _, step := range []func(string) error{h.queueMakespan, h.queueHandoff, h.queueIdleWaiters, h.queueWaiterRSS} {
		if err := step(wait); err != nil {
			return err
		}
	}
	return nil
}

// queueMakespan: 64 callers, cap 4, 0.2 s each.
func (h queueScenario) queueMakespan(wait string) error {
	reps := h.cfg.n(3, 1)
	root := h.path("roots", "queue-makespan")
	if err := h.initRoot(root, 4); err != nil {
		return err
	}
	var spans, firsts, tails, lastStarts, gapsAt4 []time.Duration
	var utils, cpuShare []float64
	var stalls []string
	worst := 0
	for rep := range reps {
		dir := h.path("queue", fmt.Sprintf("makespan-%d", rep))
		obs := dir + "/observer"
		res, err := h.burst(dir, h.env, 64, obs, func(i int) []string {
			return []string{h.crew, "--root", root, "start", wait, fmt.Sprintf("q-%d-%d", rep, i), "--", h.self, "observe", obs, "200"}
		})
		if err != nil {
			return fmt.Errorf("makespan burst %d: %w", rep, err)
		}
		if res.codes[0] != 64 {
			return fmt.Errorf("makespan burst %d: exit codes %v, expected 64 × 0", rep, res.codes)
		}
		spans = append(spans, res.makespan)
		worst = max(worst, maxConcurrency(res.observed))
		b := burstShape(res, 4)
		stalls = append(stalls, fmt.Sprintf("%s at %s", ms(b.stall), ms(b.stallAt)))
		cpuShare = append(cpuShare, float64(res.cpu)/float64(time.Duration(runtime.NumCPU())*res.makespan))
		gapsAt4 = append(gapsAt4, handoffs(res.observed)...)
		firsts, lastStarts, tails, utils = append(firsts, b.firstStart), append(lastStarts, b.lastStart), append(tails, b.tail), append(utils, b.utilization)
	}
	ideal := 3200 * time.Millisecond
	med := percentile(spans, 50)
	met := float64(med) <= 1.05*float64(ideal)
	h.rep.table([]string{"scenario", "bursts", "makespan median", "÷ ideal 3.2 s", "max concurrency", "first command started", "last command started", "last caller exited after the last command ended", "slot utilization", "longest stretch with a slot free, per burst", "handoff p50 / p90", "callers' CPU ÷ (cores × makespan)", "goal", "result"}, [][]string{{
		"64 × `crew start " + wait + " q-I -- observe 200ms`, cap 4", fmt.Sprint(reps), ms(med), fmt.Sprintf("%.3f", ratio(med, ideal)),
		fmt.Sprint(worst), ms(percentile(firsts, 50)) + " after the gate", ms(percentile(lastStarts, 50)) + " after the gate", ms(percentile(tails, 50)),
		fmt.Sprintf("%.0f%%", 100*medianFloat(utils)), strings.Join(stalls, "; "), ms(percentile(gapsAt4, 50)) + " / " + ms(percentile(gapsAt4, 90)),
		fmt.Sprintf("%.0f%%", 100*medianFloat(cpuShare)), "≤ 1.05", metStr(met)}})
	h.rep.para("Medians over the bursts. Slot utilization is the commands' total run time over 4 slots × (last end − first start): the share of slot time actually spent running commands once the line moves. The longest stretch with a slot free is measured between the first and the last start, while callers were still waiting (\"at\" is when it began, after the gate). A handoff is the time from a command's end to the start of the next command in a freed slot. The CPU share is the user + system time of all 64 callers (crew and the commands it ran, from wait4) over all cores for the whole makespan: near 100% means the machine was saturated.")
	h.measured(figMakespan, fmt.Sprintf("%s ÷ 3.2 s = **%.3f×**", ms(med), ratio(med, ideal)),
		fmt.Sprintf("bursts: %d, min–max %s–%s", reps, ms(slices.Min(spans)), ms(slices.Max(spans))), met)
	if worst > 4 {
		return fmt.Errorf("makespan bursts: %d commands ran at once at cap 4", worst)
	}
	return nil
}

// queueHandoff: cap 1, 33 callers (one runs, 32 wait).
func (h queueScenario) queueHandoff(wait string) error {
	reps := h.cfg.n(3, 1)
	root := h.path("roots", "queue-handoff")
	if err := h.initRoot(root, 1); err != nil {
		return err
	}
	var gaps []time.Duration
	for rep := range reps {
		dir := h.path("queue", fmt.Sprintf("handoff-%d", rep))
		obs := dir + "/observer"
		res, err := h.burst(dir, h.env, 33, obs, func(i int) []string {
			return []string{h.crew, "--root", root, "start", wait, fmt.Sprintf("h-%d-%d", rep, i), "--", h.self, "observe", obs, "50"}
		})
		if err != nil {
			return fmt.Errorf("handoff burst %d: %w", rep, err)
		}
		if res.codes[0] != 33 {
			return fmt.Errorf("handoff burst %d: exit codes %v, expected 33 × 0", rep, res.codes)
		}
		gaps = append(gaps, handoffs(res.observed)...)
	}
	p50, p99 := percentile(gaps, 50), percentile(gaps, 99)
	met := p50 <= 5*time.Millisecond && p99 <= 25*time.Millisecond
	h.rep.table([]string{"scenario", "handoffs", "p50", "p90", "p99", "max", "goal", "result"}, [][]string{{
		"cap 1, 33 callers (32 waiters), 50 ms commands", fmt.Sprint(len(gaps)), ms(p50), ms(percentile(gaps, 90)), ms(p99), ms(slices.Max(gaps)),
		"p50 ≤ 5 ms, p99 ≤ 25 ms", metStr(met)}})
	h.measured(figHandoff, fmt.Sprintf("**%s** / **%s**", ms(p50), ms(p99)),
		fmt.Sprintf("%d handoffs (bursts: %d); p90 %s, max %s", len(gaps), reps, ms(percentile(gaps, 90)), ms(slices.Max(gaps))), met)
	return nil
}

// queueWaiterRSS: peak RSS of a waiting crew, cap 1 held by a 2 s run.
func (h queueScenario) queueWaiterRSS(wait string) error {
	root := h.path("roots", "queue-rss")
	if err := h.initRoot(root, 1); err != nil {
		return err
	}
	var hwms []int64
	gnuTime := findGNUTime(h.env)
	for range h.cfg.n(3, 1) {
		holder := exec.Command(h.crew, "--root", root, "start", "hold", "--", "sleep", "2")
		holder.Env = h.env
		if err := holder.Start(); err != nil {
			return fmt.Errorf("waiting-RSS holder: %w", err)
		}
		time.Sleep(300 * time.Millisecond)
		m, errW := h.peakRSS(h.env, []string{h.crew, "--root", root, "start", wait, "w", "--", "true"}, gnuTime)
		errH := holder.Wait()
		if errW != nil || errH != nil {
			return fmt.Errorf("waiting-RSS run: waiter %v, holder %v", errW, errH)
		}
		hwms = append(hwms, max(m.hwm, m.life))
	}
	worst := slices.Max(hwms)
	met := worst <= 8<<20
	h.rep.table([]string{"scenario", "runs", "peak RSS median", "worst", "goal", "result"}, [][]string{{
		"`crew start " + wait + " w -- true` waiting 1 s behind a running slot (cap 1)", fmt.Sprint(len(hwms)), mib(medianInt(hwms)), mib(worst), "≤ 8 MiB", metStr(met)}})
	h.target("peak RSS of a waiting crew", mib(worst)+" worst", "≤ 8 MiB", met)
	return nil
}

// shape is where a burst's time went.
type shape struct {
	firstStart, lastStart, tail time.Duration
	utilization                 float64
	// stall is the longest stretch, between the first start and the last
	// start, with a slot free (callers still waiting); stallAt is when it
	// began, after the gate.
	stall, stallAt time.Duration
}

func burstShape(res *burstResult, slots int) shape {
	var sh shape
	if len(res.observed) == 0 {
		return sh
	}
	first, lastStart, lastEnd := res.observed[0].start, res.observed[0].start, res.observed[0].end
	var busy int64
	for _, iv := range res.observed {
		first, lastStart, lastEnd = min(first, iv.start), max(lastStart, iv.start), max(lastEnd, iv.end)
		busy += iv.end - iv.start
	}
	type ev struct {
		t     int64
		delta int
	}
	var evs []ev
	for _, iv := range res.observed {
		evs = append(evs, ev{iv.start, +1}, ev{iv.end, -1})
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if a.t != b.t {
			return cmp.Compare(a.t, b.t)
		}
		return a.delta - b.delta
	})
	cur, since := 0, first
	for _, e := range evs {
		if e.t > lastStart {
			break
		}
		if cur < slots && e.t > first && time.Duration(e.t-since) > sh.stall {
			sh.stall, sh.stallAt = time.Duration(e.t-since), time.Duration(since-res.gateOpen)
		}
		cur += e.delta
		since = e.t
	}
	sh.firstStart = time.Duration(first - res.gateOpen)
	sh.lastStart = time.Duration(lastStart - res.gateOpen)
	sh.tail = res.makespan - time.Duration(lastEnd-res.gateOpen)
	if span := lastEnd - first; span > 0 {
		sh.utilization = float64(busy) / float64(int64(slots)*span)
	}
	return sh
}
