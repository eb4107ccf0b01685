package admission

import (
	"slices"

	"github.com/crew-dev/crew/internal/record"
)

// Deadlock reports whether a start that was not admitted can never be
// admitted while it waits: something in its way is permanent because it
// is made of runs that are the start's own ancestors (ancestors: the run
// whose command called crew start, from CREW_RUN_ID, then that run's
// parent, and so on, nearest first). Such a run cannot end before the
// start it is waiting for ends. A barrier is permanent when
//
//   - the task's active run is an ancestor (a nested start of its own
//     task), unless the start is forced past nothing but the caps;
//   - every slot is held, by ancestors only (not forced);
//   - the start's pool is full, of ancestors only (not forced).
//
// Anything else in the way (a run that will end, an unreadable record,
// older waiting starts owed a free slot) may yet move, so the answer is
// then no: a start that could make progress is never called deadlocked.
// It returns the ancestors in the way, nearest first.
func Deadlock(cfg record.Config, u Usage, c Candidate, ancestors []record.RunID) []Holder {
	if len(ancestors) == 0 {
		return nil
	}
	if h, ok := u.ByTask[c.Task]; ok && slices.Contains(ancestors, h.RunID) {
		return []Holder{h}
	}
	if c.Force {
		return nil
	}
	if u.InUse >= cfg.MaximumInProgress {
		if in := onlyAncestors(u.Holders, ancestors, func(Holder) bool { return true }); in != nil {
			return in
		}
	}
	if limit, ok := cfg.Pools[c.Pool]; ok && c.Pool != "" && u.PoolUse[c.Pool] >= limit {
		return onlyAncestors(u.Holders, ancestors, func(h Holder) bool { return h.Pool == c.Pool })
	}
	return nil
}

// onlyAncestors returns the holders that count (nearest ancestor first) if
// there are some and all of them are ancestors; nil otherwise.
func onlyAncestors(holders []Holder, ancestors []record.RunID, counts func(Holder) bool) []Holder {
	var in []Holder
	for _, h := range holders {
		if !counts(h) {
			continue
		}
		if !slices.Contains(ancestors, h.RunID) {
			return nil
		}
		in = append(in, h)
	}
	var out []Holder
	for _, a := range ancestors {
		for _, h := range in {
			if h.RunID == a {
				out = append(out, h)
			}
		}
	}
	return out
}
