package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// 64 idle waiters: one run holds the only slot (`sleep 600`), 64
// `crew start --wait` queue behind it; their CPU is read from
// /proc/<pid>/task/*/schedstat (nanoseconds) over a few windows. Then the
// holder is stopped and the waiters must drain, each running `true`.

const idleWaiters = 64

func (h queueScenario) queueIdleWaiters(wait string) error {
	root := h.path("roots", "queue-idle")
	if err := h.initRoot(root, 1); err != nil {
		return err
	}
	holder, err := h.holdSlots(root, 1)
	defer holder.stop()
	if err != nil {
		return err
	}
	waiters, err := h.spawn("waiter", idleWaiters, func(i int) []string {
		return []string{h.crew, "--root", root, "start", wait, fmt.Sprintf("w-%d", i), "--", "true"}
	})
	defer waiters.stop()
	if err != nil {
		return err
	}
	if _, err := h.awaitStatus(root, 60*time.Second, func(s *statusSnapshot) bool { return len(s.Queue) == idleWaiters }); err != nil {
		return fmt.Errorf("%d waiters in line: %w", idleWaiters, err)
	}
	time.Sleep(time.Second) // settled in line
	shares, err := idleShares(waiters.pids(), h.cfg.n(3, 2), time.Duration(h.cfg.n(5, 2))*time.Second)
	if err != nil {
		return err
	}
	holder.stop()
	if err := waiters.wait(60 * time.Second); err != nil {
		return fmt.Errorf("waiters after the slot was freed: %w", err)
	}
	if err := h.expectIdle(root); err != nil {
		return err
	}
	h.reportIdle(shares)
	return nil
}

// idleShares measures the waiters' CPU over n windows, each as a share of
// one core.
func idleShares(pids []int, n int, window time.Duration) ([]float64, error) {
	var shares []float64
	for range n {
		before, err := cpuOf(pids)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		time.Sleep(window)
		after, err := cpuOf(pids)
		if err != nil {
			return nil, err
		}
		shares = append(shares, float64(after-before)/float64(time.Since(start)))
	}
	return shares, nil
}

func (h queueScenario) reportIdle(shares []float64) {
	med := medianFloat(shares)
	lo, hi := slices.Min(shares), slices.Max(shares)
	met := med <= 0.02
	h.rep.table([]string{"scenario", "windows", "CPU, share of one core (median)", "range", "goal", "result"}, [][]string{{
		fmt.Sprintf("%d `crew start --wait` behind a slot held by `sleep 600` (cap 1)", idleWaiters), fmt.Sprint(len(shares)),
		pct(med), pct(lo) + "–" + pct(hi), "≤ 2 %", metStr(met)}})
	h.rep.para("CPU is the sum over every thread of every waiter of the run time the scheduler accounts (`/proc/<pid>/task/*/schedstat`, nanoseconds), over each window, divided by the window. Afterwards the holder is stopped and all waiters must be admitted and exit 0.")
	h.measured(figIdleWaiters, fmt.Sprintf("**%s** of a core", pct(med)), fmt.Sprintf("%d windows, %s–%s", len(shares), pct(lo), pct(hi)), met)
}

func pct(f float64) string { return fmt.Sprintf("%.2f %%", 100*f) }

// cpuOf is the CPU time the scheduler accounted to every thread of the
// processes, summed.
func cpuOf(pids []int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
		if err != nil || len(tasks) == 0 {
			return 0, fmt.Errorf("no /proc/%d/task/*/schedstat (waiter gone, or not Linux)", pid)
		}
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue // a thread that just exited
			}
			f := strings.Fields(string(b))
			if len(f) == 0 {
				continue
			}
			ns, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", t, err)
			}
			total += time.Duration(ns)
		}
	}
	return total, nil
}
