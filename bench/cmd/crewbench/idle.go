package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// 64 idle waiters: one run holds the only slot (`sleep 600`), 64
// `crew start --wait` queue behind it; while nothing changes, their CPU
// (/proc/<pid>/task/*/schedstat, nanoseconds) and their wake-ups (the
// voluntary and involuntary context switches of every thread,
// /proc/<pid>/task/*/status) are read over a few windows, and their
// memory (the sum of RssAnon, and their threads) once. Then the holder is
// stopped and the waiters must drain, each running `true`.

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
	windows, err := idleWindows(waiters.pids(), h.cfg.n(3, 2), time.Duration(h.cfg.n(10, 3))*time.Second)
	if err != nil {
		return err
	}
	mem, err := memOf(waiters.pids())
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
	h.reportIdle(windows, mem)
	anchor, err := h.idleFlocks(len(windows), windows[0].length)
	if err != nil {
		return err
	}
	if anchor != "" {
		h.annotate(figIdleWake, anchor)
		h.annotate(figIdleMem, anchor)
	}
	return nil
}

// idleFlocks is the anchor of the idle waiters: 64 `flock F true` blocked
// behind a lock the harness itself holds, their wake-ups and memory read
// the same way; then the harness lets go and they must all exit 0. It
// returns a line for the figures ("" without flock).
func (h queueScenario) idleFlocks(n int, window time.Duration) (string, error) {
	flock := h.peers["flock"].bin
	if flock == "" {
		return "", nil
	}
	lock := h.path("tmp", "idle.flock")
	f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", fmt.Errorf("idle flocks: %w", err)
	}
	defer f.Close() // lets the waiters through on any way out
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("idle flocks: %w", err)
	}
	waiters, err := h.spawn("flock-waiter", idleWaiters, func(int) []string { return []string{flock, lock, "true"} })
	defer waiters.stop()
	if err != nil {
		return "", err
	}
	for _, pid := range waiters.pids() {
		if err := awaitBlockedInFlock(pid, 30*time.Second); err != nil {
			return "", fmt.Errorf("idle flocks: %w", err)
		}
	}
	ws, err := idleWindows(waiters.pids(), n, window)
	if err != nil {
		return "", err
	}
	mem, err := memOf(waiters.pids())
	if err != nil {
		return "", err
	}
	f.Close()
	if err := waiters.wait(30 * time.Second); err != nil {
		return "", fmt.Errorf("flock waiters after the lock was released: %w", err)
	}
	var wakes []int64
	for _, w := range ws {
		wakes = append(wakes, w.wakes)
	}
	h.rep.table([]string{"anchor", "windows", "wake-ups per window", "sum of RssAnon", "threads"}, [][]string{{
		fmt.Sprintf("%d `flock F true` blocked behind a lock the harness holds", idleWaiters), fmt.Sprintf("%d × %s", len(ws), window.Round(100*time.Millisecond)),
		fmt.Sprint(wakes), mib(mem.rssAnon), fmt.Sprint(mem.threads)}})
	return fmt.Sprintf("%d blocked flocks: wake-ups %v, %s", idleWaiters, wakes, mib(mem.rssAnon)), nil
}

// idleWindow is what the waiters did over one window.
type idleWindow struct {
	length time.Duration
	cpu    time.Duration // scheduler run time of every thread
	wakes  int64         // context switches of every thread
}

func (w idleWindow) share() float64 { return float64(w.cpu) / float64(w.length) }

// idleWindows measures the waiters' CPU and wake-ups over n windows.
func idleWindows(pids []int, n int, window time.Duration) ([]idleWindow, error) {
	var out []idleWindow
	for range n {
		cpu0, err := cpuOf(pids)
		if err != nil {
			return nil, err
		}
		wake0, err := switchesOf(pids)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		time.Sleep(window)
		cpu1, err := cpuOf(pids)
		if err != nil {
			return nil, err
		}
		wake1, err := switchesOf(pids)
		if err != nil {
			return nil, err
		}
		out = append(out, idleWindow{length: time.Since(start), cpu: cpu1 - cpu0, wakes: wake1 - wake0})
	}
	return out, nil
}

func (h queueScenario) reportIdle(ws []idleWindow, mem waiterMem) {
	var shares []float64
	var wakes []int64
	var total time.Duration
	for _, w := range ws {
		shares = append(shares, w.share())
		wakes = append(wakes, w.wakes)
		total += w.length
	}
	med := medianFloat(shares)
	lo, hi := slices.Min(shares), slices.Max(shares)
	sumWakes := int64(0)
	for _, n := range wakes {
		sumWakes += n
	}
	wakeMet, memMet := sumWakes == 0, mem.rssAnon <= 32<<20
	h.rep.table([]string{"scenario", "windows", "wake-ups per window", "CPU, share of one core (median)", "range", "sum of RssAnon", "threads", "goal", "result"}, [][]string{{
		fmt.Sprintf("%d `crew start --wait` behind a slot held by `sleep 600` (cap 1)", idleWaiters), fmt.Sprintf("%d × %s", len(ws), ws[0].length.Round(100*time.Millisecond)),
		fmt.Sprint(wakes), pct(med), pct(lo) + "–" + pct(hi), mib(mem.rssAnon), fmt.Sprintf("%d (%.1f each)", mem.threads, float64(mem.threads)/float64(idleWaiters)),
		"0 wake-ups; ≤ 32 MiB", metStr(wakeMet) + "; " + metStr(memMet)}})
	h.rep.para(fmt.Sprintf("Wake-ups are the voluntary plus involuntary context switches of every thread of every waiter (`/proc/<pid>/task/*/status`) over each window while nothing in the root changes; CPU is the scheduler's run time of the same threads (`/proc/<pid>/task/*/schedstat`, nanoseconds) over the window. Memory is the sum of the waiters' `RssAnon` (`/proc/<pid>/status`), read once after the windows. The windows cover %s in all; a safety poll longer than that (crew's is 30 s) may fall outside them. Afterwards the holder is stopped and all waiters must be admitted and exit 0.", total.Round(time.Second)))
	h.measured(figIdleWake, fmt.Sprintf("**%d** wake-ups in %s; CPU **%s** of a core", sumWakes, total.Round(time.Second), pct(med)),
		fmt.Sprintf("%d windows: wake-ups %v; CPU %s–%s", len(ws), wakes, pct(lo), pct(hi)), wakeMet)
	h.measured(figIdleMem, fmt.Sprintf("**%s** (%d threads)", mib(mem.rssAnon), mem.threads), fmt.Sprintf("%s per waiter", mib(mem.rssAnon/idleWaiters)), memMet)
}

func pct(f float64) string { return fmt.Sprintf("%.2f %%", 100*f) }

// waiterMem is the waiters' memory: the sum of RssAnon, and their threads.
type waiterMem struct {
	rssAnon int64
	threads int
}

// memOf sums RssAnon and Threads of /proc/<pid>/status over the pids.
func memOf(pids []int) (waiterMem, error) {
	var m waiterMem
	for _, pid := range pids {
		f, err := statusFields(fmt.Sprintf("/proc/%d/status", pid), "RssAnon", "Threads")
		if err != nil {
			return m, err
		}
		m.rssAnon += f["RssAnon"] * 1024 // kB
		m.threads += int(f["Threads"])
	}
	return m, nil
}

// switchesOf sums the voluntary and involuntary context switches of every
// thread of the pids.
func switchesOf(pids []int) (int64, error) {
	var total int64
	for _, pid := range pids {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
		if err != nil || len(tasks) == 0 {
			return 0, fmt.Errorf("no /proc/%d/task/*/status (waiter gone, or not Linux)", pid)
		}
		for _, t := range tasks {
			f, err := statusFields(t, "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
			if err != nil {
				continue // a thread that just exited
			}
			total += f["voluntary_ctxt_switches"] + f["nonvoluntary_ctxt_switches"]
		}
	}
	return total, nil
}

// statusFields reads the named numeric fields of a /proc status file
// ("RssAnon:\t  1234 kB" gives 1234).
func statusFields(path string, names ...string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(names, k) {
			continue
		}
		if f := strings.Fields(v); len(f) > 0 {
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, k, err)
			}
			out[k] = n
		}
	}
	for _, k := range names {
		if _, ok := out[k]; !ok {
			return nil, fmt.Errorf("%s: no %s", path, k)
		}
	}
	return out, nil
}

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
