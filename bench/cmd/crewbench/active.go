package main

import (
	"fmt"
	"time"
)

// Start with 200 active runs vs with 1: 199 long runs (`sleep`) are
// admitted first in one root, none in the other (cap 256 in both); then
// one start is timed in each, alternating. The timed start is the 200th
// (or the 1st) active run.

const activeHeld = 199

func (h activeScenario) scenarioActive() error {
	r := &h.rep
	r.heading(2, fmt.Sprintf("Admission with %d active runs vs with 1", activeHeld+1))
	busy, idle := h.path("roots", "active-200"), h.path("roots", "active-1")
	for _, root := range []string{busy, idle} {
		if err := h.initRoot(root, 256); err != nil {
			return err
		}
	}
	holders, err := h.holdSlots(busy, activeHeld)
	defer holders.stop()
	if err != nil {
		return err
	}
	ok := []int{0}
	ss, err := h.alternate("active runs", []contender{
		{name: "200 active", what: "crew --root R start t -- true, 199 other runs active", run: h.execRunner(h.env, ok, h.crew, "--root", busy, "start", "t", "--", "true")},
		{name: "1 active", what: "crew --root R start t -- true, no other run active", run: h.execRunner(h.env, ok, h.crew, "--root", idle, "start", "t", "--", "true")},
	}, h.cfg.n(100, 30), 3)
	if err != nil {
		return err
	}
	holders.stop()
	if err := h.expectIdle(busy); err != nil {
		return err
	}
	a, b := ss[0], ss[1]
	rt := ratio(a.median(), b.median())
	r.table([]string{"contender", "command", "runs", "median", "p10–p90", "CPU median"}, [][]string{
		{a.name, "`" + a.what + "`", fmt.Sprint(len(a.samples)), ms(a.median()), a.spread(), ms(a.cpuMedian())},
		{b.name, "`" + b.what + "`", fmt.Sprint(len(b.samples)), ms(b.median()), b.spread(), ms(b.cpuMedian())},
	})
	r.para(fmt.Sprintf("The %d other runs are `crew start hold-I -- sleep 600` processes the harness started and stopped afterwards (SIGTERM, which crew forwards; `crew status --json` then shows no active run). Per extra active run: %s.",
		activeHeld, us((a.median()-b.median())/activeHeld)))
	h.measured(figActive, fmt.Sprintf("%s ÷ %s = **%.2f×**", ms(a.median()), ms(b.median()), rt), ratioSpread(a, b), rt <= 1.3)
	return nil
}

// holdSlots starts n runs of `sleep 600` in root and waits until crew
// status counts all n as holding slots.
func (h *harness) holdSlots(root string, n int) (*children, error) {
	h.progress("holding %d slots in %s", n, root)
	c, err := h.spawn("hold", n, func(i int) []string {
		return []string{h.crew, "--root", root, "start", fmt.Sprintf("hold-%d", i), "--", "sleep", "600"}
	})
	if err != nil {
		return c, err
	}
	_, err = h.awaitStatus(root, 60*time.Second, func(s *statusSnapshot) bool { return s.SlotsInUse == n })
	if err != nil {
		return c, fmt.Errorf("%d held runs: %w", n, err)
	}
	return c, nil
}

// expectIdle checks that the runs the harness stopped are gone from root.
func (h *harness) expectIdle(root string) error {
	_, err := h.awaitStatus(root, 10*time.Second, func(s *statusSnapshot) bool { return len(s.Active) == 0 && len(s.Queue) == 0 })
	if err != nil {
		return fmt.Errorf("after stopping the harness's runs: %w", err)
	}
	return nil
}
