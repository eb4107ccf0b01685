package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// ---------------------------------------------------------------------------
// Correctness: 100 concurrent callers at cap 2; what did each tool allow?

const (
	corrCallers = 100
	corrSleepMs = 30
)

func (h *harness) scenarioCorrectness() error {
	r := &h.rep
	reps := h.cfg.n(10, 3)
	r.heading(2, fmt.Sprintf("Correctness: %d concurrent callers at cap 2, %d times", corrCallers, reps))
	r.para(fmt.Sprintf("Each caller's command is `crewbench observe FILE %d`, which appends its own start and end (CLOCK_MONOTONIC, ns) to an observer file and sleeps %d ms in between. The %d callers are started behind one gate (a FIFO they all block on) and released together. The table gives the most commands the observer ever saw running at one instant, over all bursts, exactly as observed.", corrSleepMs, corrSleepMs, corrCallers))

	type tool struct {
		name, cmd string
		cap       int
		capNote   string
		refusals  []int // exit codes that mean "not admitted" (fine)
		env       []string
		args      func(rep, i int, obs string) []string
		setup     func(rep int) error
		stop      func()
	}
	var tools []tool
	crewRoot := h.path("roots", "correctness")
	tools = append(tools, tool{
		name: "crew", cmd: "crew --root R start c-REP-I -- crewbench observe FILE 30", cap: 2, capNote: "`crew init --max 2`",
		refusals: []int{75}, env: h.env,
		setup: func(int) error { return h.initRoot(crewRoot, 2) },
		args: func(rep, i int, obs string) []string {
			return []string{h.crew, "--root", crewRoot, "start", fmt.Sprintf("c-%d-%d", rep, i), "--", h.self, "observe", obs, fmt.Sprint(corrSleepMs)}
		},
	})
	if p := h.peers["sem"]; p.bin != "" {
		tools = append(tools, tool{
			name: "sem", cmd: "sem --will-cite --fg -j 2 --id corr-REP crewbench observe FILE 30", cap: 2, capNote: "`-j 2`; queues the rest",
			env: h.env,
			args: func(rep, i int, obs string) []string {
				return []string{p.bin, "--will-cite", "--fg", "-j", "2", "--id", fmt.Sprintf("corr-%d", rep), h.self, "observe", obs, fmt.Sprint(corrSleepMs)}
			},
		})
	}
	if p := h.peers["tsp"]; p.bin != "" {
		t := tool{
			name: "tsp", cmd: "tsp -f -n crewbench observe FILE 30", cap: 2, capNote: "server started with `tsp -S 2`; queues the rest",
			args: func(rep, i int, obs string) []string {
				return []string{p.bin, "-f", "-n", h.self, "observe", obs, fmt.Sprint(corrSleepMs)}
			},
		}
		env, stop, err := h.tspServer("correctness", 2)
		if err != nil {
			return err
		}
		t.env, t.stop = env, stop
		tools = append(tools, t)
	}
	if p := h.peers["flock"]; p.bin != "" {
		lock := h.path("tmp", "correctness.flock")
		tools = append(tools, tool{
			name: "flock", cmd: "flock -n FILE crewbench observe FILE 30", cap: 1,
			capNote:  "no cap N: one lock file is a mutex (cap 1); `-n` refuses (exit 1) instead of queueing",
			refusals: []int{1}, env: h.env,
			args: func(rep, i int, obs string) []string {
				return []string{p.bin, "-n", lock, h.self, "observe", obs, fmt.Sprint(corrSleepMs)}
			},
		})
	}
	defer func() {
		for _, t := range tools {
			if t.stop != nil {
				t.stop()
			}
		}
	}()

	var rows [][]string
	var stderrNotes []string
	for _, t := range tools {
		if t.setup != nil {
			if err := t.setup(0); err != nil {
				return err
			}
		}
		h.progress("correctness: %s, %d bursts of %d callers", t.name, reps, corrCallers)
		var perRep []string
		worst, ran, refused := 0, 0, 0
		other := map[int]int{}
		var spans []time.Duration
		var msgs []lineCount
		msgIdx := map[string]int{}
		for rep := range reps {
			dir := h.path("correctness", fmt.Sprintf("%s-%d", t.name, rep))
			obs := dir + "/observer"
			res, err := h.burst(dir, t.env, corrCallers, obs, func(i int) []string { return t.args(rep, i, obs) })
			if err != nil {
				return fmt.Errorf("%s burst %d: %w", t.name, rep, err)
			}
			for _, m := range res.stderr {
				msgs = addLine(msgs, msgIdx, m.line, m.n)
			}
			mc := maxConcurrency(res.observed)
			worst = max(worst, mc)
			perRep = append(perRep, fmt.Sprint(mc))
			spans = append(spans, res.makespan)
			for code, k := range res.codes {
				switch {
				case code == 0:
					ran += k
				case slices.Contains(t.refusals, code):
					refused += k
				default:
					other[code] += k
				}
			}
			if n0 := res.codes[0]; len(res.observed) != n0 {
				return fmt.Errorf("%s burst %d: %d callers exited 0 but the observer saw %d commands", t.name, rep, n0, len(res.observed))
			}
		}
		var otherS []string
		for code, k := range other {
			otherS = append(otherS, fmt.Sprintf("exit %d: %d", code, k))
		}
		slices.Sort(otherS)
		if len(otherS) == 0 {
			otherS = []string{"none"}
		}
		verdict := fmt.Sprintf("never more than %d", t.cap)
		if worst > t.cap {
			verdict = fmt.Sprintf("**OVER-ADMITTED: %d running at cap %d**", worst, t.cap)
		}
		refusedS := fmt.Sprint(refused)
		if len(t.refusals) == 0 {
			refusedS = "— (queues)"
		} else {
			refusedS += fmt.Sprintf(" (exit %d)", t.refusals[0])
		}
		rows = append(rows, []string{t.name, "`" + t.cmd + "`", fmt.Sprint(t.cap) + ": " + t.capNote, fmt.Sprintf("%d × %d", reps, corrCallers),
			fmt.Sprint(ran), refusedS, strings.Join(otherS, ", "), fmt.Sprintf("**%d**", worst), strings.Join(perRep, " "),
			ms(percentile(spans, 50)), verdict})
		if len(msgs) > 0 {
			slices.SortStableFunc(msgs, func(a, b lineCount) int { return b.n - a.n })
			var lines []string
			for _, x := range msgs[:min(5, len(msgs))] {
				lines = append(lines, fmt.Sprintf("%d× `%s`", x.n, tail([]byte(x.line), 160)))
			}
			stderrNotes = append(stderrNotes, fmt.Sprintf("- %s (%d distinct): %s", t.name, len(msgs), strings.Join(lines, "; ")))
		}
		if t.name == "crew" {
			h.target("correctness: crew, 100 callers at cap 2", fmt.Sprintf("max %d running at once over %d bursts", worst, reps), "never more than 2", worst <= 2)
		}
	}
	r.table([]string{"tool", "command", "cap", "bursts × callers", "commands run", "refused", "other exits", "max concurrency observed", "per burst", "burst makespan (median)", "verdict"}, rows)
	if len(stderrNotes) > 0 {
		r.para("What the callers printed on stderr, over all bursts (numbers, run ids and the work directory normalized; most frequent first, then in order of appearance; at most 5 per tool):\n\n" + strings.Join(stderrNotes, "\n"))
	}
	var notes []string
	if p := h.peers["nq"]; p.bin != "" {
		notes = append(notes, "nq is not in this table: it has no cap to set (a strict serial queue, cap 1 by construction).")
	}
	if h.peers["flock"].bin != "" {
		notes = append(notes, "flock(1) has no cap N; it is shown at the only cap it has (1, one lock file) with `-n`, which refuses like crew.")
	}
	for name, p := range h.peers {
		if p.bin == "" && name != "nq" {
			notes = append(notes, fmt.Sprintf("%s is not installed: `%s`.", name, p.install))
		}
	}
	slices.Sort(notes)
	if len(notes) > 0 {
		r.para(strings.Join(notes, " "))
	}
	return nil
}
