package finishindex

import (
	"fmt"
	"strings"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// SizeBudget bounds one measurement of the finished runs, so that status
// stays cheap whatever the history.
type SizeBudget struct {
	Measure int // runs measured: two or three stats each
	Count   int // runs counted besides: their names listed
	Sample  int // runs of those counted that are measured, as a sample
}

// FinishedSize is what the finished runs' records and logs take, as one
// measurement within a budget found it: a shard the done index describes
// costs one stat; others are measured (a stat per record and log) within
// the budget, then only counted (and a few of their runs sampled), then
// only extrapolated from the rest. It changes nothing (status never
// writes), so what it measures is not kept; prunes keep the index.
type FinishedSize struct {
	Records, Logs vocab.FileCount
	// Crowded lists the shards that hold more runs than were listed of
	// them: the figures are lower bounds.
	Crowded []string

	budget SizeBudget
	shards int
	// How each shard was known: from the index, measured now, counted,
	// or not even that (guessed).
	indexed, measured, counted, guessed int
	measuredRuns, countedRuns           int
	known                               ShardStats // indexed or measured
	sample                              ShardStats // runs sampled in shards only counted
}

// Size measures the finished runs within b.
func (x *DoneIndex) Size(b SizeBudget) (FinishedSize, error) {
	shards, err := x.Shards()
	if err != nil {
		return FinishedSize{}, err
	}
	f := FinishedSize{budget: b, shards: len(shards)}
	// Newest first: the recent history is the likeliest to be exact.
	for i := len(shards) - 1; i >= 0; i-- {
		if err := f.visit(x, shards[i]); err != nil {
			return FinishedSize{}, err
		}
	}
	f.extrapolate()
	return f, nil
}

// visit takes in one shard: from the index if it describes the shard,
// else measured while the budget allows, else counted (a few of its runs
// sampled), else, once the runs counted fill the budget, only guessed.
func (f *FinishedSize) visit(x *DoneIndex, sh string) error {
	// Only a shard the index has an entry for is looked at first (one
	// lstat, to tell whether the entry still describes it): with 100 days
	// of hourly shards and no index, that was 2,400 lstats per crew status
	// for nothing (issue 25).
	if _, indexed := x.entries[sh]; indexed {
		if l := x.lookup(sh); l.valid && l.entry.LogBytes >= 0 {
			f.indexed++
			f.known.add(l.entry.ShardStats)
			return nil
		}
	}
	if f.countedRuns+f.measuredRuns >= f.budget.Count {
		f.guessed++
		return nil
	}
	// One shard may be listed past what is left of the budget (the whole
	// shard, up to the budget), so that only a shard that alone holds
	// more runs than the budget is counted only in part.
	ids, complete, err := x.listUpTo(sh, f.budget.Count)
	if err != nil {
		return err
	}
	if !complete {
		f.Crowded = append(f.Crowded, sh)
	}
	if complete && f.measuredRuns+len(ids) <= f.budget.Measure {
		f.measured++
		f.measuredRuns += len(ids)
		f.known.add(x.measure(sh, ids))
		return nil
	}
	f.counted++
	f.countedRuns += len(ids)
	if n := min(len(ids), f.budget.Sample-f.sample.Runs, 16); n > 0 {
		f.sample.add(x.measure(sh, spread(ids, n)))
	}
	return nil
}

// extrapolate makes the totals: what is known exactly, plus the counted
// runs at the average of the sampled ones (or of the known ones), and the
// shards not even counted at the average count.
func (f *FinishedSize) extrapolate() {
	f.Records = vocab.FileCount{Files: f.known.Runs, Bytes: f.known.RecordBytes}
	f.Logs = vocab.FileCount{Files: f.known.LogFiles, Bytes: f.known.LogBytes}
	extra := f.countedRuns
	if visited := f.indexed + f.measured + f.counted; f.guessed > 0 && visited > 0 {
		extra += f.guessed * (f.known.Runs + f.countedRuns) / visited
	}
	basis := f.sample
	if basis.Runs == 0 {
		basis = f.known
	}
	f.Records.Files += extra
	if basis.Runs > 0 {
		f.Records.Bytes += int64(extra) * basis.RecordBytes / int64(basis.Runs)
		f.Logs.Files += extra * basis.LogFiles / basis.Runs
		f.Logs.Bytes += int64(extra) * basis.LogBytes / int64(basis.Runs)
	}
}

// Exact reports whether every shard was known or measured: nothing was
// only counted or extrapolated.
func (f FinishedSize) Exact() bool { return f.counted == 0 && f.guessed == 0 }

// Method says how the figures were arrived at, with active, how many
// active runs were measured beside them.
func (f FinishedSize) Method(active int) string {
	var m string
	if f.Exact() {
		m = fmt.Sprintf("exact: %d hour-shards of finished runs (%d from the done index, %d measured now) and %d active runs",
			f.shards, f.indexed, f.measured, active)
	} else {
		m = fmt.Sprintf("estimated: of %d hour-shards of finished runs, %d are known exactly (%d from the done index, %d measured now), "+
			"%d were counted (%d runs, %d of them measured as a sample) and %d not even that; the rest is extrapolated "+
			"(crew prune, or retention, keeps the done index that makes this exact)",
			f.shards, f.indexed+f.measured, f.indexed, f.measured, f.counted, f.countedRuns, f.sample.Runs, f.guessed)
	}
	if len(f.Crowded) > 0 {
		m += fmt.Sprintf("; hour-shard %s holds more than the %d runs listed of it, so the figures are lower bounds",
			strings.Join(f.Crowded, ", "), f.budget.Count)
	}
	return m
}

func (a *ShardStats) add(b ShardStats) {
	a.Runs += b.Runs
	a.RecordBytes += b.RecordBytes
	a.LogFiles += b.LogFiles
	a.LogBytes += max(b.LogBytes, 0)
}

// spread picks n ids spread over the list.
func spread(ids []record.RunID, n int) []record.RunID {
	out := make([]record.RunID, 0, n)
	for i := range n {
		out = append(out, ids[i*len(ids)/n])
	}
	return out
}
