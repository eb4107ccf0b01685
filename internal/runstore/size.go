package runstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// Budgets of one size measurement, so that status stays cheap whatever
// the history: how many runs it measures (two or three stats each), how
// many more it counts (listing names), and how many of those it samples.
const (
	sizeMeasureBudget = 256
	sizeCountBudget   = 1000
	sizeSampleBudget  = 64
)

// Size measures the records (finished and active) and their logs cheaply:
// a shard the done index describes costs one stat; others are measured (a
// stat per record and log) within a budget, then only counted (and a few
// of their runs sampled), then only extrapolated from the rest. It changes
// nothing (status never writes), so what it measures is not kept; prunes
// keep the index. Method says which of these happened.
func (s *Store) Size() (vocab.RootSize, error) {
	return s.sizeWithin(sizeMeasureBudget, sizeCountBudget, sizeSampleBudget)
}

// sizeWithin is Size with its budgets.
func (s *Store) sizeWithin(measureBudget, countBudget, sampleBudget int) (vocab.RootSize, error) {
	var out vocab.RootSize
	if !s.Exists() {
		out.Exact, out.Method = true, "exact: no state root yet"
		return out, nil
	}
	x := s.OpenDoneIndex(time.Now)
	defer x.Close()
	shards, err := x.Shards()
	if err != nil {
		return out, err
	}
	var (
		known                     ShardStats // exactly known: indexed or measured
		sample                    ShardStats // runs sampled in shards only counted
		countedRuns, measuredRuns int
		indexed, measured         int
		counted, guessed          int
	)
	// Newest first: the recent history is the likeliest to be exact.
	for i := len(shards) - 1; i >= 0; i-- {
		sh := shards[i]
		l := x.lookup(sh)
		if l.valid && l.entry.LogBytes >= 0 {
			indexed++
			known.add(l.entry.ShardStats)
			continue
		}
		if countedRuns+measuredRuns >= countBudget {
			guessed++
			continue
		}
		// One shard may be listed past what is left of the budget (the
		// whole shard, up to the budget), so that only a shard that alone
		// holds more runs than the budget is counted only in part.
		ids, complete, err := x.listUpTo(sh, countBudget)
		if err != nil {
			return out, err
		}
		if !complete {
			out.Crowded = append(out.Crowded, sh)
		}
		if complete && measuredRuns+len(ids) <= measureBudget {
			measured++
			measuredRuns += len(ids)
			known.add(x.measure(sh, ids))
			continue
		}
		counted++
		countedRuns += len(ids)
		if n := min(len(ids), sampleBudget-sample.Runs, 16); n > 0 {
			sample.add(x.measure(sh, spread(ids, n)))
		}
	}
	out.Records = vocab.FileCount{Files: known.Runs, Bytes: known.RecordBytes}
	out.Logs = vocab.FileCount{Files: known.LogFiles, Bytes: known.LogBytes}
	// Extrapolate: the counted runs at the average of the sampled ones (or
	// of the known ones), the shards not even counted at the average count.
	extra := countedRuns
	if visited := indexed + measured + counted; guessed > 0 && visited > 0 {
		extra += guessed * (known.Runs + countedRuns) / visited
	}
	basis := sample
	if basis.Runs == 0 {
		basis = known
	}
	out.Records.Files += extra
	if basis.Runs > 0 {
		out.Records.Bytes += int64(extra) * basis.RecordBytes / int64(basis.Runs)
		out.Logs.Files += extra * basis.LogFiles / basis.Runs
		out.Logs.Bytes += int64(extra) * basis.LogBytes / int64(basis.Runs)
	}
	nActive, err := s.addActive(&out)
	if err != nil {
		return out, err
	}
	out.Bytes = out.Records.Bytes + out.Logs.Bytes
	out.Exact = counted == 0 && guessed == 0
	if out.Exact {
		out.Method = fmt.Sprintf("exact: %d hour-shards of finished runs (%d from the done index, %d measured now) and %d active runs",
			len(shards), indexed, measured, nActive)
	} else {
		out.Method = fmt.Sprintf("estimated: of %d hour-shards of finished runs, %d are known exactly (%d from the done index, %d measured now), "+
			"%d were counted (%d runs, %d of them measured as a sample) and %d not even that; the rest is extrapolated "+
			"(crew prune, or retention, keeps the done index that makes this exact)",
			len(shards), indexed+measured, indexed, measured, counted, countedRuns, sample.Runs, guessed)
	}
	if len(out.Crowded) > 0 {
		out.Method += fmt.Sprintf("; hour-shard %s holds more than the %d runs listed of it, so the figures are lower bounds",
			strings.Join(out.Crowded, ", "), countBudget)
	}
	return out, nil
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

// addActive adds the active runs' records and logs, always measured:
// there are few. It returns how many there are.
func (s *Store) addActive(out *vocab.RootSize) (int, error) {
	active, err := s.ListActive()
	if err != nil {
		return 0, err
	}
	dir, derr := s.dir(activeDir)
	if derr == nil {
		defer dir.Close()
	}
	logs, lerr := s.logs.Sizer()
	if lerr == nil {
		defer logs.Close()
	}
	n := 0
	for _, e := range active {
		if e.Finished || e.ID == "" {
			continue
		}
		n++
		if derr == nil {
			if fi, err := dir.Lstat(e.Name); err == nil {
				out.Records.Files++
				out.Records.Bytes += fi.Size()
			}
		}
		if lerr == nil {
			if size, ok := logs.Head(e.ID); ok {
				out.Logs.Files++
				out.Logs.Bytes += size + s.logs.TailBytes(e.ID)
			}
		}
	}
	return n, nil
}
