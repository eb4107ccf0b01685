package dispatch

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/runstore"
)

// PruneVersion is the version of `crew prune --json`.
const PruneVersion = 1

// PruneOptions selects finished runs to remove. A run is removed if it
// finished longer than OlderThan ago (when set) and is not among the Keep
// newest finished runs (when set).
type PruneOptions struct {
	OlderThan time.Duration
	Keep      int
	KeepSet   bool
	DryRun    bool
}

// PrunedRun is one removed (or, dry, removable) finished run.
type PrunedRun struct {
	RunID      runstore.RunID `json:"runId"`
	Task       string         `json:"task"`
	FinishedAt *time.Time     `json:"finishedAt"`
	Path       string         `json:"path"`
	Bytes      int64          `json:"bytes"`
}

// PruneReport is what Prune did.
type PruneReport struct {
	Version int         `json:"version"`
	DryRun  bool        `json:"dryRun"`
	Removed []PrunedRun `json:"removed"`
	Kept    int         `json:"kept"`
	Errors  []string    `json:"errors"`
}

// Prune removes finished runs' records and logs. It only ever touches
// runs/done/ and the logs of runs found there: active and queued runs live
// elsewhere, so it is safe while starts and recoveries run. A finished
// record whose active file still exists (a finalization cut short) is
// kept, so the active file is never mistaken for a living run.
func (d *Dispatcher) Prune(opts PruneOptions) (*PruneReport, error) {
	st := d.Store
	report := &PruneReport{Version: PruneVersion, DryRun: opts.DryRun, Removed: []PrunedRun{}, Errors: []string{}}
	days, err := os.ReadDir(st.DoneDir())
	if errors.Is(err, os.ErrNotExist) {
		return report, nil
	}
	if err != nil {
		return nil, err
	}
	// Newest first: day directories, then run ids within a day.
	slices.Reverse(days)
	now := d.now()
	seen := 0
	for _, day := range days {
		if !day.IsDir() || runstore.IsTempName(day.Name()) {
			continue
		}
		dir := filepath.Join(st.DoneDir(), day.Name())
		names, err := runstore.ReadDirNames(dir)
		if err != nil {
			report.Errors = append(report.Errors, err.Error())
			continue
		}
		slices.Sort(names)
		slices.Reverse(names)
		removedAll := true
		for _, name := range names {
			idStr, ok := strings.CutSuffix(name, ".json")
			if !ok || !runstore.LooksLikeRunID(idStr) {
				removedAll = false
				continue
			}
			id := runstore.RunID(idStr)
			seen++
			path := filepath.Join(dir, name)
			rec, err := st.ReadRecord(path)
			if err != nil {
				report.Errors = append(report.Errors, err.Error())
				removedAll = false
				continue
			}
			if !d.prunable(rec, seen, now, opts) {
				report.Kept++
				removedAll = false
				continue
			}
			if _, err := os.Stat(st.ActivePath(id)); err == nil {
				report.Kept++
				removedAll = false
				continue
			}
			p := PrunedRun{RunID: id, Task: rec.Task, FinishedAt: rec.FinishedAt, Path: path}
			for _, f := range []string{path, st.LogPath(id)} {
				if fi, err := os.Stat(f); err == nil {
					p.Bytes += fi.Size()
				}
			}
			if !opts.DryRun {
				if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
					report.Errors = append(report.Errors, err.Error())
					removedAll = false
					continue
				}
				_ = os.Remove(st.LogPath(id))
			}
			report.Removed = append(report.Removed, p)
		}
		if removedAll && !opts.DryRun {
			_ = os.Remove(dir) // only if empty; a run finishing into it now keeps it
		}
	}
	if !opts.DryRun && len(report.Removed) > 0 {
		_ = runstore.SyncDir(st.DoneDir())
	}
	return report, nil
}

func (d *Dispatcher) prunable(rec *runstore.Record, rank int, now time.Time, opts PruneOptions) bool {
	if opts.KeepSet && rank <= opts.Keep {
		return false
	}
	if opts.OlderThan > 0 {
		if rec.FinishedAt == nil || now.Sub(*rec.FinishedAt) < opts.OlderThan {
			return false
		}
	}
	return true
}
