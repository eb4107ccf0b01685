package recovery

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strings"
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
// short), or whose log a crew wait holds, is kept. It reads every finished
// record, so it knows exactly which N runs finished last.
func Prune(st *runstore.Store, opts PruneOptions) (*PruneReport, error) {
	report := &PruneReport{Version: PruneVersion, DryRun: opts.DryRun, Removed: []PrunedRun{}, Errors: []string{}}
	p := opts.Policy
	if p.KeepsEverything() {
		return report, nil
	}
	runs, err := finishedByFinish(st, report)
	if err != nil {
		return nil, err
	}
	touched := map[string]bool{}
	for i, r := range runs {
		byCount := p.KeepNewest >= 0 && i >= p.KeepNewest
		if !p.removable(r.fin, byCount, opts.Now) {
			report.Kept++
			continue
		}
		fin := r.fin
		pr := PrunedRun{RunID: r.id, Task: r.task, FinishedAt: &fin, Path: st.DonePath(r.id), Bytes: st.FinishedSize(r.id)}
		if !opts.DryRun {
			switch err := st.RemoveFinished(r.id); {
			case errors.Is(err, runstore.ErrRunBusy):
				report.Kept++
				continue
			case err != nil:
				report.Errors = append(report.Errors, err.Error())
				continue
			}
			touched[r.id.Shard()] = true
		}
		report.Removed = append(report.Removed, pr)
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
		_, _ = st.FinishIndex().CompactIndex()
	}
	return report, nil
}

// finishedRun is what a prune needs of a finished record.
type finishedRun struct {
	id   record.RunID
	task string
	fin  time.Time
}

// finishedByFinish reads every finished record and returns the runs,
// latest finish first (ties: newest id first). Records that cannot be read
// are reported and left alone: they are neither counted nor removed.
func finishedByFinish(st *runstore.Store, report *PruneReport) ([]finishedRun, error) {
	var runs []finishedRun
	err := st.FinishIndex().WalkFinished(func(id record.RunID) bool {
		rec, err := st.ReadDone(id)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// pruned by someone else meanwhile
		case err != nil:
			report.Errors = append(report.Errors, err.Error())
		case rec.FinishedAt == nil || rec.State.Active():
			report.Errors = append(report.Errors, fmt.Sprintf("run record %s: a finished record without an end (state %s)", st.DonePath(id), rec.State))
		default:
			runs = append(runs, finishedRun{id: id, task: rec.Task, fin: *rec.FinishedAt})
		}
		return true
	})
	slices.SortStableFunc(runs, func(a, b finishedRun) int {
		if c := b.fin.Compare(a.fin); c != 0 {
			return c
		}
		return strings.Compare(string(b.id), string(a.id))
	})
	return runs, err
}

// refreshIndex brings the done index up to date with every shard (a full
// prune has just read them all anyway), so that status and lazy prunes
// find them there.
func refreshIndex(st *runstore.Store) {
	x := st.FinishIndex().OpenDoneIndex(time.Now)
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
