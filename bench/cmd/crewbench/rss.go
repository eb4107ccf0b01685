package main

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Peak RSS.

// rssTool is one process whose peak memory is measured.
type rssTool struct {
	name, what string
	args, env  []string
	stop       func()
}

func (h rssScenario) scenarioRSS() error {
	h.rep.heading(2, "Peak memory of a supervising `crew start t -- sleep 1`")
	tools, err := h.rssTools()
	defer func() {
		for _, t := range tools {
			if t.stop != nil {
				t.stop()
			}
		}
	}()
	if err != nil {
		return err
	}
	reps := h.cfg.n(4, 2)
	gnuTime := findGNUTime(h.env)
	got := make([][]memSample, len(tools))
	h.progress("rss: %d rounds of %d tools, 1 s each", reps, len(tools))
	for range reps {
		for i, t := range tools {
			m, err := h.peakRSS(t.env, t.args, gnuTime)
			if err != nil {
				return fmt.Errorf("peak RSS of %s: %w", t.name, err)
			}
			got[i] = append(got[i], m)
		}
	}
	var rows [][]string
	for i, t := range tools {
		rows = append(rows, h.rssRow(t, got[i]))
	}
	h.rep.table([]string{"tool", "command", "runs", "VmHWM median", "VmHWM worst", "RssAnon", "RssFile", "whole-life maxrss median", "worst", "goal", "result"}, rows)
	lifeNote := "GNU time is not installed (`apt-get install -y time`), so there is no whole-life figure."
	if gnuTime != "" {
		lifeNote = "The whole-life maxrss is the kernel's own peak for the process, from wait4(2) as reported by GNU time (`" + gnuTime + " -f %M`), which starts the tool with fork(2). It is not taken from the harness's own wait4: Go starts children with CLONE_VM|CLONE_VFORK, and the kernel charges the parent's (the harness's) peak RSS to the child's maxrss when it execs, so a Go-started child's ru_maxrss is the harness's size, whatever the child does."
	}
	h.rep.para("VmHWM (peak), RssAnon and RssFile come from `/proc/<pid>/status` of the process the user started, read every 10 ms until it exits (last reading shown for RssAnon/RssFile). " + lifeNote + " RssFile is mostly the executable's own pages, shared with every other process running the same binary. The goal is checked against the worst run of either measure.")
	h.rep.note("Peak RSS of a *waiting* crew is in the queue section.")
	return nil
}

// rssTools are crew and the installed peers, each running `sleep 1`.
func (h rssScenario) rssTools() ([]rssTool, error) {
	root := h.path("roots", "rss")
	if err := h.initRoot(root, 4); err != nil {
		return nil, err
	}
	tools := []rssTool{{name: "crew", what: "crew --root R start t -- sleep 1", args: []string{h.crew, "--root", root, "start", "t", "--", "sleep", "1"}, env: h.env}}
	if fl, err := h.buildFloors(); err == nil {
		tools = append(tools, rssTool{name: "Go + cobra + fork/exec", what: "floor-cobra start t -- sleep 1 (the supervisor floor of the diagnostics: no records, no output capture)", args: []string{fl.cobra, "start", "t", "--", "sleep", "1"}, env: h.env})
	} else {
		h.progress("rss: floor programs not built: %v", err)
	}
	if p := h.peers["flock"]; p.bin != "" {
		tools = append(tools, rssTool{name: "flock", what: "flock FILE sleep 1", args: []string{p.bin, h.path("tmp", "rss.flock"), "sleep", "1"}, env: h.env})
	}
	if p := h.peers["sem"]; p.bin != "" {
		tools = append(tools, rssTool{name: "sem", what: "sem --will-cite --fg -j 4 --id rss sleep 1", args: []string{p.bin, "--will-cite", "--fg", "-j", "4", "--id", "rss", "sleep", "1"}, env: h.env})
	}
	if p := h.peers["tsp"]; p.bin != "" {
		env, stop, err := h.tspServer("rss", 4)
		if err != nil {
			return tools, err
		}
		tools = append(tools, rssTool{name: "tsp", what: "tsp -f -n sleep 1 (the client process; the server is separate)", args: []string{p.bin, "-f", "-n", "sleep", "1"}, env: env, stop: stop})
	}
	return tools, nil
}

// rssRow reports one tool's samples; for crew it fills the figure.
func (h rssScenario) rssRow(t rssTool, samples []memSample) []string {
	col := func(f func(memSample) int64) []int64 {
		var out []int64
		for _, m := range samples {
			out = append(out, f(m))
		}
		return out
	}
	hwm, life := col(func(m memSample) int64 { return m.hwm }), col(func(m memSample) int64 { return m.life })
	goal, res := "", ""
	if t.name == "crew" {
		const limit = 5 << 20
		worst := max(slices.Max(hwm), slices.Max(life))
		med := max(medianInt(hwm), medianInt(life))
		goal, res = "≤ 5 MiB", metStr(worst <= limit)
		h.measured(figRSS, fmt.Sprintf("**%s** worst", mib(worst)), fmt.Sprintf("median %s over %d runs (VmHWM and GNU time maxrss)", mib(med), len(hwm)), worst <= limit)
	}
	return []string{t.name, "`" + t.what + "`", fmt.Sprint(len(samples)), mib(medianInt(hwm)), mib(slices.Max(hwm)),
		mib(medianInt(col(func(m memSample) int64 { return m.anon }))), mib(medianInt(col(func(m memSample) int64 { return m.file }))),
		mib(medianInt(life)), mib(slices.Max(life)), goal, res}
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
