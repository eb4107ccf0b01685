package main

import (
	"fmt"
	"path/filepath"
	"strings"
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

func (h concurrentScenario) scenarioConcurrent() error {
	r := &h.rep
	r.heading(2, fmt.Sprintf("Concurrent starters: %d callers of distinct tasks × %d rounds, vs `flock F true`", concCallers, concRounds))
	flock := h.peers["flock"].bin
	if flock == "" {
		h.notMeasured(figConcurrent, h.whyMissing("flock"))
		h.notMeasured(figConcurrentTmpfs, h.whyMissing("flock"))
		r.note("Skipped: " + h.whyMissing("flock") + ".")
		return nil
	}
	// The same load on a state root on the work directory's disk and on
	// tmpfs: crew creates six files per run and deletes four, and on an
	// ext4 without a journal every creation walks past the inodes deleted
	// in the last minutes, which 32 callers at once make expensive.
	roots := map[string]string{"crew": h.path("roots", "concurrent")}
	if shm := h.tmpfs(); shm != "" {
		roots["crew, tmpfs"] = filepath.Join(shm, "concurrent")
	} else {
		h.notMeasured(figConcurrentTmpfs, "no tmpfs at /dev/shm")
	}
	for _, root := range roots {
		if err := h.initRoot(root, 2*concCallers); err != nil {
			return err
		}
	}
	lock := h.path("tmp", "concurrent.flock")
	what := func(where string) string {
		return fmt.Sprintf("crew --root %s start c-REP-ROUND-I -- true (cap %d)", where, 2*concCallers)
	}
	all := []*series{{contender: contender{name: "crew", what: what("R")}}}
	if _, ok := roots["crew, tmpfs"]; ok {
		all = append(all, &series{contender: contender{name: "crew, tmpfs", what: what("TMPFS/R")}})
	}
	fl := &series{contender: contender{name: "flock", what: "flock F true"}}
	all = append(all, fl)
	reps := h.cfg.n(5, 2)
	h.progress("concurrent: %d repetitions of %d rounds × %d callers, %d contenders alternating", reps, concRounds, concCallers, len(all))
	for rep := range reps {
		for round := range concRounds {
			for _, s := range all {
				args := func(i int) []string { return []string{flock, lock, "true"} }
				if root, ok := roots[s.name]; ok {
					args = func(i int) []string {
						return []string{h.crew, "--root", root, "start", fmt.Sprintf("c-%d-%d-%d", rep, round, i), "--", "true"}
					}
				}
				d, err := h.concurrentRound(fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(s.name, ", ", "-"), rep, round), args)
				if err != nil {
					return fmt.Errorf("%s, repetition %d round %d: %w", s.name, rep+1, round+1, err)
				}
				s.samples = append(s.samples, sample{wall: d, cpu: -1})
			}
		}
	}
	h.reportConcurrent(all, fl, reps)
	return nil
}

// concurrentRound runs one burst of concCallers behind the gate and
// returns the time from the gate opening to the last exit.
func (h concurrentScenario) concurrentRound(label string, args func(i int) []string) (time.Duration, error) {
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
// rounds) and compares each crew's sums with flock's.
func (h concurrentScenario) reportConcurrent(all []*series, fl *series, reps int) {
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
	rate := func(s *series) string {
		return fmt.Sprintf("%.0f/s", float64(concCallers)/s.median().Seconds())
	}
	var rows [][]string
	for _, s := range all {
		s4 := sum(s)
		rows = append(rows, []string{s.name, "`" + s.what + "`", fmt.Sprint(reps), ms(s4.median()), s4.spread(), ms(s.median()), s.spread(), rate(s)})
	}
	h.rep.table([]string{"tool", "command", "repetitions", "4 rounds: median", "p10–p90", "one round: median", "p10–p90", "starts per second (median round)"}, rows)
	h.rep.para(fmt.Sprintf("A round is %d callers released together through a FIFO gate; its time runs from the gate opening to the last caller's exit. Rounds alternate crew (disk root), crew (tmpfs root), flock, ...; a repetition is %d rounds of each. Every caller must exit 0 (crew's cap is %d, so all are admitted).", concCallers, concRounds, 2*concCallers))
	f4 := sum(fl)
	for _, s := range all {
		id := figConcurrent
		switch s.name {
		case "crew":
		case "crew, tmpfs":
			id = figConcurrentTmpfs
		default:
			continue
		}
		c4 := sum(s)
		rt := ratio(c4.median(), f4.median())
		h.measured(id, fmt.Sprintf("%s ÷ %s = **%.2f×**", ms(c4.median()), ms(f4.median()), rt),
			ratioSpread(s, fl)+" over single rounds", rt <= 2.0)
	}
}
