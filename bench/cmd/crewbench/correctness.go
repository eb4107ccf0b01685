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

// corrTool is one tool of the correctness table.
type corrTool struct {
	name, cmd string
	cap       int
	capNote   string
	refusals  []int // exit codes that mean "not admitted" (fine)
	env       []string
	args      func(rep, i int, obs string) []string
	setup     func() error
	stop      func()
}

// corrResult is what the bursts of one tool showed.
type corrResult struct {
	perRep             []string
	worst, ran, refuse int
	other              map[int]int
	spans              []time.Duration
	msgs               []lineCount
}

func (h correctnessScenario) scenarioCorrectness() error {
	r := &h.rep
	reps := h.cfg.n(10, 3)
	r.heading(2, fmt.Sprintf("Correctness: %d concurrent callers at cap 2, %d times", corrCallers, reps))
	r.para(fmt.Sprintf("Each caller's command is `crewbench observe FILE %d`, which appends its own start and end (CLOCK_MONOTONIC, ns) to an observer file and sleeps %d ms in between. The %d callers are started behind one gate (a FIFO they all block on) and released together. The table gives the most commands the observer ever saw running at one instant, over all bursts, exactly as observed.", corrSleepMs, corrSleepMs, corrCallers))
	tools, err := h.correctnessTools()
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
	var rows [][]string
	var stderrNotes []string
	for _, t := range tools {
		res, err := h.correctnessBursts(t, reps)
		if err != nil {
			return err
		}
		rows = append(rows, res.row(t, reps))
		if note := res.stderrNote(t.name); note != "" {
			stderrNotes = append(stderrNotes, note)
		}
		if t.name == "crew" {
			h.target("correctness: crew, 100 callers at cap 2", fmt.Sprintf("max %d running at once over %d bursts", res.worst, reps), "never more than 2", res.worst <= 2)
		}
	}
	r.table([]string{"tool", "command", "cap", "bursts × callers", "commands run", "refused", "other exits", "max concurrency observed", "per burst", "burst makespan (median)", "verdict"}, rows)
	if len(stderrNotes) > 0 {
		r.para("What the callers printed on stderr, over all bursts (numbers, run ids and the work directory normalized; most frequent first, then in order of appearance; at most 5 per tool):\n\n" + strings.Join(stderrNotes, "\n"))
	}
	if notes := h.correctnessNotes(); notes != "" {
		r.para(notes)
	}
	return nil
}

// correctnessTools are crew and the installed peers that have a cap; stop
// ends the tsp server.
func (h correctnessScenario) correctnessTools() ([]corrTool, error) {
	obsArgs := func(obs string) []string { return []string{h.self, "observe", obs, fmt.Sprint(corrSleepMs)} }
	crewRoot := h.path("roots", "correctness")
	tools := []corrTool{{
		name: "crew", cmd: "crew --root R start c-REP-I -- crewbench observe FILE 30", cap: 2, capNote: "`crew init --max 2`",
		refusals: []int{75}, env: h.env,
		setup: func() error { return h.initRoot(crewRoot, 2) },
		args: func(rep, i int, obs string) []string {
			return append([]string{h.crew, "--root", crewRoot, "start", fmt.Sprintf("c-%d-%d", rep, i), "--"}, obsArgs(obs)...)
		},
	}}
	if p := h.peers["sem"]; p.bin != "" {
		tools = append(tools, corrTool{
			name: "sem", cmd: "sem --will-cite --fg -j 2 --id corr-REP crewbench observe FILE 30", cap: 2, capNote: "`-j 2`; queues the rest",
			env: h.env,
			args: func(rep, i int, obs string) []string {
				return append([]string{p.bin, "--will-cite", "--fg", "-j", "2", "--id", fmt.Sprintf("corr-%d", rep)}, obsArgs(obs)...)
			},
		})
	}
	if p := h.peers["tsp"]; p.bin != "" {
		env, stop, err := h.tspServer("correctness", 2)
		if err != nil {
			return tools, err
		}
		tools = append(tools, corrTool{
			name: "tsp", cmd: "tsp -f -n crewbench observe FILE 30", cap: 2, capNote: "server started with `tsp -S 2`; queues the rest",
			env: env, stop: stop,
			args: func(rep, i int, obs string) []string { return append([]string{p.bin, "-f", "-n"}, obsArgs(obs)...) },
		})
	}
	if p := h.peers["flock"]; p.bin != "" {
		lock := h.path("tmp", "correctness.flock")
		tools = append(tools, corrTool{
			name: "flock", cmd: "flock -n FILE crewbench observe FILE 30", cap: 1,
			capNote:  "no cap N: one lock file is a mutex (cap 1); `-n` refuses (exit 1) instead of queueing",
			refusals: []int{1}, env: h.env,
			args: func(rep, i int, obs string) []string { return append([]string{p.bin, "-n", lock}, obsArgs(obs)...) },
		})
	}
	return tools, nil
}

// correctnessBursts runs reps bursts of corrCallers callers of one tool.
func (h correctnessScenario) correctnessBursts(t corrTool, reps int) (*corrResult, error) {
	if t.setup != nil {
		if err := t.setup(); err != nil {
			return nil, err
		}
	}
	h.progress("correctness: %s, %d bursts of %d callers", t.name, reps, corrCallers)
	res := &corrResult{other: map[int]int{}}
	msgIdx := map[string]int{}
	for rep := range reps {
		dir := h.path("correctness", fmt.Sprintf("%s-%d", t.name, rep))
		obs := dir + "/observer"
		b, err := h.burst(dir, t.env, corrCallers, obs, func(i int) []string { return t.args(rep, i, obs) })
		if err != nil {
			return nil, fmt.Errorf("%s burst %d: %w", t.name, rep, err)
		}
		for _, m := range b.stderr {
			res.msgs = addLine(res.msgs, msgIdx, m.line, m.n)
		}
		mc := maxConcurrency(b.observed)
		res.worst = max(res.worst, mc)
		res.perRep = append(res.perRep, fmt.Sprint(mc))
		res.spans = append(res.spans, b.makespan)
		for code, k := range b.codes {
			switch {
			case code == 0:
				res.ran += k
			case slices.Contains(t.refusals, code):
				res.refuse += k
			default:
				res.other[code] += k
			}
		}
		if n0 := b.codes[0]; len(b.observed) != n0 {
			return nil, fmt.Errorf("%s burst %d: %d callers exited 0 but the observer saw %d commands", t.name, rep, n0, len(b.observed))
		}
	}
	return res, nil
}

func (res *corrResult) row(t corrTool, reps int) []string {
	var other []string
	for code, k := range res.other {
		other = append(other, fmt.Sprintf("exit %d: %d", code, k))
	}
	slices.Sort(other)
	if len(other) == 0 {
		other = []string{"none"}
	}
	verdict := fmt.Sprintf("never more than %d", t.cap)
	if res.worst > t.cap {
		verdict = fmt.Sprintf("**OVER-ADMITTED: %d running at cap %d**", res.worst, t.cap)
	}
	refused := "— (queues)"
	if len(t.refusals) > 0 {
		refused = fmt.Sprintf("%d (exit %d)", res.refuse, t.refusals[0])
	}
	return []string{t.name, "`" + t.cmd + "`", fmt.Sprint(t.cap) + ": " + t.capNote, fmt.Sprintf("%d × %d", reps, corrCallers),
		fmt.Sprint(res.ran), refused, strings.Join(other, ", "), fmt.Sprintf("**%d**", res.worst), strings.Join(res.perRep, " "),
		ms(percentile(res.spans, 50)), verdict}
}

// stderrNote lists the most frequent messages of a tool's callers.
func (res *corrResult) stderrNote(name string) string {
	if len(res.msgs) == 0 {
		return ""
	}
	msgs := slices.Clone(res.msgs)
	slices.SortStableFunc(msgs, func(a, b lineCount) int { return b.n - a.n })
	var lines []string
	for _, x := range msgs[:min(5, len(msgs))] {
		lines = append(lines, fmt.Sprintf("%d× `%s`", x.n, tail([]byte(x.line), 160)))
	}
	return fmt.Sprintf("- %s (%d distinct): %s", name, len(msgs), strings.Join(lines, "; "))
}

func (h correctnessScenario) correctnessNotes() string {
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
	return strings.Join(notes, " ")
}
