package e2e

// Whole-process benchmarks of the real binary as users build it (plainCrew:
// no failpoints, no race detector, even under `go test -race`), built only
// when a benchmark runs. Run with `make bench` (or
// `go test -run '^$' -bench . ./e2e/`); nothing here asserts a time.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func benchEnv(b *testing.B) *env {
	base := b.TempDir()
	e := &env{bin: plainCrew(b), root: filepath.Join(base, "state"), dir: filepath.Join(base, "scratch")}
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		b.Fatal(err)
	}
	return e
}

// crew is a command running the benchmarked crew binary.
func (e *env) crew(args ...string) *exec.Cmd {
	cmd := exec.Command(e.bin, args...)
	cmd.Env = e.environ()
	return cmd
}

func (e *env) benchRun(b *testing.B, args ...string) {
	if out, err := e.crew(args...).CombinedOutput(); err != nil {
		b.Fatalf("crew %v: %v\n%s", args, err, out)
	}
}

// benchWaitFor polls `crew status --json` until cond holds, or fails the
// benchmark: one that went on regardless would measure something else.
func (e *env) benchWaitFor(b *testing.B, what string, cond func(statusJSON, queueJSON) bool) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := e.crew("status", "--json").Output()
		if err != nil {
			b.Fatalf("crew status: %v", err)
		}
		var s statusJSON
		var q queueJSON
		if err := json.Unmarshal(out, &s); err != nil {
			b.Fatal(err)
		}
		if err := json.Unmarshal(out, &q); err != nil {
			b.Fatal(err)
		}
		if cond(s, q) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startHolder starts a run that holds the only slot until its gate opens
// (at the latest when the benchmark ends), and waits until it runs.
func (e *env) startHolder(b *testing.B) (cmd *exec.Cmd, gate string) {
	gate = filepath.Join(e.dir, "gate")
	b.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })
	cmd = e.crew(append([]string{"start", "holder", "--"}, waitCmd(gate)...)...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	e.benchWaitFor(b, "the holder to run", func(s statusJSON, _ queueJSON) bool {
		return len(s.Active) == 1 && s.Active[0].State == "running"
	})
	return cmd, gate
}

func inLine(n int) func(statusJSON, queueJSON) bool {
	return func(_ statusJSON, q queueJSON) bool { return len(q.Queue) == n }
}

// BenchmarkStartTrue is `crew start t -- true`, end to end: admission,
// three durable record writes, fork/exec, finalization.
func BenchmarkStartTrue(b *testing.B) {
	e := benchEnv(b)
	e.benchRun(b, "start", "t", "--", "true")
	b.ResetTimer()
	for range b.N {
		e.benchRun(b, "start", "t", "--", "true")
	}
}

// BenchmarkFlockTrue is the baseline users compare with: flock(1).
func BenchmarkFlockTrue(b *testing.B) {
	if _, err := exec.LookPath("flock"); err != nil {
		b.Skip("flock(1) not installed")
	}
	lock := filepath.Join(b.TempDir(), "lock")
	b.ResetTimer()
	for range b.N {
		if err := exec.Command("flock", lock, "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// readObserver returns the start and end times (ns) the commands logged.
func readObserver(b *testing.B, path string) (starts, ends []int64) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		ns, _ := strconv.ParseInt(fields[1], 10, 64)
		if fields[0] == "start" {
			starts = append(starts, ns)
		} else {
			ends = append(ends, ns)
		}
	}
	slices.Sort(starts)
	slices.Sort(ends)
	return starts, ends
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

// BenchmarkQueueHandoff: 32 waiters at a cap of 1. Handoff latency is
// the time from one run's command exiting to the next waiter's command
// having started, as the commands themselves record it.
func BenchmarkQueueHandoff(b *testing.B) {
	for range b.N {
		e := benchEnv(b)
		e.benchRun(b, "init", "--max", "1")
		obs := filepath.Join(e.dir, "observer")
		holder, gate := e.startHolder(b)
		const n = 32
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = e.crew(append([]string{"start", "--wait", fmt.Sprintf("w%d", i), "--"}, observerCmd(obs, "0.02")...)...).Run()
			}()
		}
		time.Sleep(2 * time.Second) // everyone in line ...
		e.benchWaitFor(b, "every waiter to be in line", inLine(n))
		_ = os.WriteFile(gate, nil, 0o600)
		_ = holder.Wait()
		wg.Wait()
		starts, ends := readObserver(b, obs)
		if len(starts) != n {
			b.Fatalf("%d of %d waiters ran", len(starts), n)
		}
		var lat []float64
		for i := 1; i < len(starts) && i-1 < len(ends); i++ {
			lat = append(lat, float64(starts[i]-ends[i-1])/1e6)
		}
		slices.Sort(lat)
		b.ReportMetric(percentile(lat, 0.50), "p50-ms")
		b.ReportMetric(percentile(lat, 0.99), "p99-ms")
		b.ReportMetric(float64(len(starts)), "runs")
	}
}

// BenchmarkQueueMakespan: 64 processes, cap 4, each `sleep 0.2`, all with
// --wait; the ideal makespan is 64/4 × 0.2 s = 3.2 s.
func BenchmarkQueueMakespan(b *testing.B) {
	for range b.N {
		e := benchEnv(b)
		e.benchRun(b, "init", "--max", "4")
		begin := time.Now()
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = e.crew("start", "--wait", fmt.Sprintf("j%d", i), "--", "sleep", "0.2").Run()
			}()
		}
		wg.Wait()
		took := time.Since(begin)
		b.ReportMetric(took.Seconds(), "makespan-s")
		b.ReportMetric(took.Seconds()/3.2, "x-ideal")
	}
}

// BenchmarkIdleWaiters: 64 waiters behind a run that holds the only slot
// for 10 s; reports the CPU the waiters use, in percent of one core.
func BenchmarkIdleWaiters(b *testing.B) {
	tick, err := clockTicks()
	if err != nil {
		b.Skip(err)
	}
	for range b.N {
		e := benchEnv(b)
		e.benchRun(b, "init", "--max", "1")
		holder, gate := e.startHolder(b)
		const n = 64
		var waiters []*exec.Cmd
		for i := range n {
			cmd := e.crew("start", "--wait", fmt.Sprintf("w%d", i), "--", "true")
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			waiters = append(waiters, cmd)
		}
		time.Sleep(2 * time.Second) // settled in line ...
		e.benchWaitFor(b, "every waiter to be in line", inLine(n))
		cpu0 := 0.0
		for _, w := range waiters {
			cpu0 += procCPU(w.Process.Pid, tick)
		}
		const window = 10 * time.Second
		time.Sleep(window)
		cpu1 := 0.0
		for _, w := range waiters {
			cpu1 += procCPU(w.Process.Pid, tick)
		}
		b.ReportMetric(100*(cpu1-cpu0)/window.Seconds(), "pct-of-one-core")
		_ = os.WriteFile(gate, nil, 0o600)
		_ = holder.Wait()
		for _, w := range waiters {
			_ = w.Wait()
		}
	}
}

// clockTicks is the kernel's USER_HZ, for /proc/<pid>/stat.
func clockTicks() (float64, error) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return 0, fmt.Errorf("no /proc: %w", err)
	}
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 100, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 100, nil
	}
	return float64(n), nil
}

// procCPU is a process's user+system CPU time in seconds.
func procCPU(pid int, tick float64) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / tick
}
