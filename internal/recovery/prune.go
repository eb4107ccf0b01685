package recovery

import (
	"errors"
	"io/fs"
	"math"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

// PruneVersion is the version of `crew prune --json`.
const PruneVersion = 1

// PruneOptions selects finished runs to remove: those Policy lets go
// (crew prune --keep N --older-than D, or the configured retention).
type PruneOptions struct {
	Policy Policy
	DryRun bool
	Now    time.Time
}

// PrunedRun is one removed (or, dry, removable) finished run.
type PrunedRun struct {
	RunID      record.RunID `json:"runId"`
	Task       string       `json:"task"`
	FinishedAt *time.Time   `json:"finishedAt"`
	Path       string       `json:"path"`
	Bytes      int64        `json:"bytes"`
}

// PruneReport is what Prune did.
type PruneReport struct {
	Version int         `json:"version"`
	DryRun  bool        `json:"dryRun"`
	Removed []PrunedRun `json:"removed"`
	Kept    int         `json:"kept"`
	Errors  []string    `json:"errors"`
}

// Prune removes finished runs' records and logs, newest kept first. It
// only ever touches finished runs (and their logs): active and queued runs
// live elsewhere, so it is safe while starts and recoveries run. A
// finished record whose active file still exists (a finalization cut
// short) is kept, so the active file is never mistaken for a living run.
func Prune(st *runstore.Store, opts PruneOptions) (*PruneReport, error) {
	report := &PruneReport{Version: PruneVersion, DryRun: opts.DryRun, Removed: []PrunedRun{}, Errors: []string{}}
	p := opts.Policy
	if p.KeepsEverything() {
		return report, nil
	}
	seen := 0
	b := boundary{all: p.KeepNewest == 0, ok: p.KeepNewest == 0}
	touched := map[string]bool{}
	err := st.WalkFinished(func(id record.RunID) bool {
		seen++
		if p.KeepNewest > 0 && seen == p.KeepNewest {
			if at, err := id.CreatedAt(); err == nil {
				b = boundary{at: at, id: id, ok: true}
			}
		}
		rec, err := st.ReadDone(id)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return true // pruned by someone else meanwhile
		case err != nil:
			report.Errors = append(report.Errors, err.Error())
			return true
		case p.KeepNewest > 0 && seen <= p.KeepNewest, !p.removable(rec, b, opts.Now):
			report.Kept++
			return true
		}
		p := PrunedRun{RunID: id, Task: rec.Task, FinishedAt: rec.FinishedAt, Path: st.DonePath(id), Bytes: st.FinishedSize(id)}
		if !opts.DryRun {
			switch err := st.RemoveFinished(id); {
			case errors.Is(err, runstore.ErrRunBusy):
				report.Kept++
				return true
			case err != nil:
				report.Errors = append(report.Errors, err.Error())
				return true
			}
			touched[id.Shard()] = true
		}
		report.Removed = append(report.Removed, p)
		return true
	})
	if err != nil {
		return nil, err
	}
	for shard := range touched {
		st.RemoveShardIfEmpty(shard)
	}
	if !opts.DryRun {
		refreshIndex(st)
	}
	if len(touched) > 0 {
		// The index of finished runs still lists the removed runs (readers
		// skip them); drop them while it is read anyway. A failure leaves
		// it as it was.
		_, _ = st.CompactIndex()
	}
	return report, nil
}

// refreshIndex brings the done index up to date with every shard (a full
// prune has just read them all anyway), so that status and lazy prunes
// find them there.
func refreshIndex(st *runstore.Store) {
	x := st.OpenDoneIndex(time.Now)
	defer x.Close()
	shards, err := x.Shards()
	if err != nil {
		return
	}
	for _, sh := range shards {
		_, _, _ = x.Stats(sh, math.MaxInt)
	}
	x.Save()
}
