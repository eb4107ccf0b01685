package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"time"
)

// RootSize is what the state root's records and logs take, as `crew
// status` reports it.
type RootSize struct {
	// Bytes is Records.Bytes + Logs.Bytes.
	Bytes   int64     `json:"bytes"`
	Records FileCount `json:"records"`
	Logs    FileCount `json:"logs"`
	// Exact is false when part of it was extrapolated (see Method).
	Exact bool `json:"exact"`
	// Method says how the figures were obtained.
	Method string `json:"method"`
}

// FileCount is a number of files and their bytes.
type FileCount struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// Budgets of one size measurement: how many runs it measures (two or three
// stats each) and how many more it counts (listing names) before it
// extrapolates.
const (
	sizeMeasureBudget = 2048
	sizeCountBudget   = 50_000
)

// Size measures the records (finished and active) and their logs cheaply:
// a shard the done index describes costs one stat; others are measured (a
// stat per record and log) within a budget, then only counted, then only
// extrapolated from the shards already known. It changes nothing (status
// never writes), so what it measures is not kept; prunes keep the index.
// Method says which of these happened.
func (s *Store) Size() (RootSize, error) {
	return s.sizeWithin(sizeMeasureBudget, sizeCountBudget)
}

// sizeWithin is Size with its budgets: measure up to measureBudget runs,
// then count up to countBudget more.
func (s *Store) sizeWithin(measureBudget, countBudget int) (RootSize, error) {
	var out RootSize
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
	measuredRuns, countedRuns := 0, 0
	var indexed, measured, counted, guessed int
	var known ShardStats
	var onlyCounted []int
	for _, sh := range shards {
		var st ShardStats
		var fresh bool
		var err error
		switch {
		case countedRuns < countBudget:
			st, fresh, err = x.Stats(sh, max(measureBudget-measuredRuns, 0))
		default:
			if e, ok := x.cached(sh); ok && e.LogBytes >= 0 {
				st = e.ShardStats
			} else {
				guessed++
				continue
			}
		}
		var notDir *NotDirError
		if errors.Is(err, fs.ErrNotExist) || errors.As(err, &notDir) {
			continue
		}
		if err != nil {
			return out, err
		}
		if st.LogBytes < 0 {
			countedRuns += st.Runs
			counted++
			onlyCounted = append(onlyCounted, st.Runs)
			continue
		}
		if fresh {
			measuredRuns += st.Runs
			measured++
		} else {
			indexed++
		}
		known.Runs += st.Runs
		known.RecordBytes += st.RecordBytes
		known.LogFiles += st.LogFiles
		known.LogBytes += st.LogBytes
	}
	out.Records = FileCount{Files: known.Runs, Bytes: known.RecordBytes}
	out.Logs = FileCount{Files: known.LogFiles, Bytes: known.LogBytes}
	// Extrapolate what was only counted, or not even that, from the
	// average of what was measured.
	extra := 0
	for _, n := range onlyCounted {
		extra += n
	}
	if guessed > 0 && indexed+measured+counted > 0 {
		extra += guessed * (known.Runs + countedRuns) / (indexed + measured + counted)
	}
	if extra > 0 && known.Runs > 0 {
		out.Records.Files += extra
		out.Records.Bytes += int64(extra) * known.RecordBytes / int64(known.Runs)
		out.Logs.Files += extra * known.LogFiles / known.Runs
		out.Logs.Bytes += int64(extra) * known.LogBytes / int64(known.Runs)
	} else {
		out.Records.Files += extra
	}
	// The active runs, always measured: there are few.
	active, err := s.ListActive()
	if err != nil {
		return out, err
	}
	nActive := 0
	logs, lerr := s.dir(logsDir)
	if lerr == nil {
		defer logs.Close()
	}
	for _, e := range active {
		if e.Finished || e.ID == "" {
			continue
		}
		nActive++
		if n, err := s.activeSize(e.Name); err == nil {
			out.Records.Files++
			out.Records.Bytes += n
		}
		if lerr == nil {
			if fi, err := logs.Lstat(logName(e.ID)); err == nil {
				out.Logs.Files++
				out.Logs.Bytes += fi.Size() + s.tailBytes(e.ID)
			}
		}
	}
	out.Bytes = out.Records.Bytes + out.Logs.Bytes
	out.Exact = counted == 0 && guessed == 0
	if out.Exact {
		out.Method = fmt.Sprintf("exact: %d hour-shards of finished runs (%d from the done index, %d measured now) and %d active runs",
			len(shards), indexed, measured, nActive)
	} else {
		out.Method = fmt.Sprintf("estimated: of %d hour-shards of finished runs, %d are known exactly (%d from the done index, %d measured now), "+
			"%d were only counted and %d not even that; their sizes are extrapolated from the known ones (crew prune refreshes the done index)",
			len(shards), indexed+measured, indexed, measured, counted, guessed)
	}
	return out, nil
}

// activeSize is the size of a file of the active set.
func (s *Store) activeSize(name string) (int64, error) {
	dir, err := s.dir(activeDir)
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	fi, err := dir.Lstat(name)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
