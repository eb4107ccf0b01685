package main

import (
	"fmt"
	"time"
)

// Concurrent starters: 32 callers of distinct tasks released together
// (through the gate of observe.go), 4 rounds, against the same load on
// `flock F true`. crew's cap is 64, so every start is admitted: the figure
// is the cost of admission under contention, not of refusals.

const (
	concCallers = 32
	concRounds  = 4
)

func (h *harness) scenarioConcurrent() error {
	r := &h.rep
	r.heading(2, fmt.Sprintf("Concurrent starters: %d callers of distinct tasks × %d rounds, vs `flock F true`", concCallers, concRounds))
	flock := h.peers["flock"].bin
	if flock == "" {
		h.notMeasured(figConcurrent, h.whyMissing("flock"))
		r.note("Skipped: " + h.whyMissing("flock") + ".")
		return nil
	}
	root := h.path("roots", "concurrent")
	if err := h.initRoot(root, 2*concCallers); err != nil {
		return err
	}
	lock := h.path("tmp", "concurrent.flock")
	crew := &series{contender: contender{name: "crew", what: fmt.Sprintf("crew --root R start c-REP-ROUND-I -- true (cap %d)", 2*concCallers)}}
	fl := &series{contender: contender{name: "flock", what: "flock F true"}}
	reps := h.cfg.n(5, 2)
	h.progress("concurrent: %d repetitions of %d rounds × %d callers, crew and flock alternating", reps, concRounds, concCallers)
	for rep := range reps {
		for round := range concRounds {
			for _, s := range []*series{crew, fl} {
				args := func(i int) []string { return []string{flock, lock, "true"} }
				if s == crew {
					args = func(i int) []string {
						return []string{h.crew, "--root", root, "start", fmt.Sprintf("c-%d-%d-%d", rep, round, i), "--", "true"}
					}
				}
				d, err := h.concurrentRound(fmt.Sprintf("%s-%d-%d", s.name, rep, round), args)
				if err != nil {
					return fmt.Errorf("%s, repetition %d round %d: %w", s.name, rep+1, round+1, err)
				}
				s.samples = append(s.samples, sample{wall: d, cpu: -1})
			}
		}
	}
	h.reportConcurrent(crew, fl, reps)
	return nil
}

// concurrentRound runs one burst of concCallers behind the gate and
// returns the time from the gate opening to the last exit.
func (h *harness) concurrentRound(label string, args func(i int) []string) (time.Duration, error) {
	dir := h.path("concurrent", label)
	res, err := h.burst(dir, h.env, concCallers, dir+"/observer", args)
	if err != nil {
		return 0, err
	}
	if res.codes[0] != concCallers {
		return 0, fmt.Errorf("exit codes %v, want %d × 0", res.codes, concCallers)
	}
	return res.makespan, nil
}

// reportConcurrent sums each repetition's rounds (the load is 4
// rounds) and compares the sums.
func (h *harness) reportConcurrent(crew, fl *series, reps int) {
	sum := func(s *series) *series {
		out := &series{contender: s.contender}
		for rep := range reps {
			var t time.Duration
			for _, x := range s.samples[rep*concRounds : (rep+1)*concRounds] {
				t += x.wall
			}
			out.samples = append(out.samples, sample{wall: t, cpu: -1})
		}
		return out
	}
	c4, f4 := sum(crew), sum(fl)
	rt := ratio(c4.median(), f4.median())
	rate := func(s *series) string {
		return fmt.Sprintf("%.0f/s", float64(concCallers)/s.median().Seconds())
	}
	h.rep.table([]string{"tool", "command", "repetitions", "4 rounds: median", "p10–p90", "one round: median", "p10–p90", "starts per second (median round)"}, [][]string{
		{"crew", "`" + crew.what + "`", fmt.Sprint(reps), ms(c4.median()), c4.spread(), ms(crew.median()), crew.spread(), rate(crew)},
		{"flock", "`" + fl.what + "`", fmt.Sprint(reps), ms(f4.median()), f4.spread(), ms(fl.median()), fl.spread(), rate(fl)},
	})
	h.rep.para(fmt.Sprintf("A round is %d callers released together through a FIFO gate; its time runs from the gate opening to the last caller's exit. Rounds alternate crew, flock, crew, flock ...; a repetition is %d rounds of each. Every caller must exit 0 (crew's cap is %d, so all are admitted).", concCallers, concRounds, 2*concCallers))
	h.measured(figConcurrent, fmt.Sprintf("%s ÷ %s = **%.2f×**", ms(c4.median()), ms(f4.median()), rt),
		ratioSpread(crew, fl)+" over single rounds", rt <= 2.0)
}
