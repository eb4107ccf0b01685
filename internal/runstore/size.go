package runstore

import (
	"time"

	"github.com/crew-dev/crew/internal/finishindex"
	"github.com/crew-dev/crew/internal/vocab"
)

// Budgets of one size measurement, so that status stays cheap whatever
// the history: how many runs it measures (two or three stats each), how
// many more it counts (listing names), and how many of those it samples.
const (
	sizeMeasureBudget = 128
	sizeCountBudget   = 500
	sizeSampleBudget  = 32
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
	x := s.index.OpenDoneIndex(time.Now)
	defer x.Close()
	fin, err := x.Size(finishindex.SizeBudget{Measure: measureBudget, Count: countBudget, Sample: sampleBudget})
	if err != nil {
		return out, err
	}
	out.Records, out.Logs, out.Crowded = fin.Records, fin.Logs, fin.Crowded
	nActive, err := s.addActive(&out)
	if err != nil {
		return out, err
	}
	out.Bytes = out.Records.Bytes + out.Logs.Bytes
	out.Exact = fin.Exact()
	out.Method = fin.Method(nActive)
	return out, nil
}

// addActive adds the active runs' records and logs, always measured:
// there are few. It returns how many there are.
func (s *Store) addActive(out *vocab.RootSize) (int, error) {
	active, err := s.ListActive()
	if err != nil {
		return 0, err
	}
	dir, derr := s.layout(activeDir)
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
