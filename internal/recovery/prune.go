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
	"github.com/crew-dev/crew/internal/retention"
	"github.com/crew-dev/crew/internal/runstore"
)

// RemoveFinished removes a finished run's record and log (dry: only says
// how much they take). A run a crew wait holds, or whose finalization was
// cut short, is kept: retention.ErrHeld.
func RemoveFinished(st *runstore.Store, id record.RunID, dry bool) (int64, error) {
	size := st.FinishedSize(id)
	if dry {
		return size, nil
	}
	err := st.RemoveFinished(id)
	if errors.Is(err, runstore.ErrRunBusy) {
		return size, fmt.Errorf("run %s: %w: %w", id, retention.ErrHeld, err)
	}
	return size, err
}

// AfterPrune tidies what crew prune's removals leave: shards left empty,
// and the index of finished runs, which still lists the removed runs
// (readers skip them) and is brought up to date with every shard (a full
// prune has just read them all anyway).
func AfterPrune(st *runstore.Store, removed []record.RunID) {
	touched := map[string]bool{}
	for _, id := range removed {
		touched[id.Shard()] = true
	}
	for shard := range touched {
		st.RemoveShardIfEmpty(shard)
	}
	refreshIndex(st)
	if len(touched) > 0 {
		_, _ = st.FinishIndex().CompactIndex() // a failure leaves it as it was
	}
}

// ByFinish reads every finished record and returns the runs, latest
// finish first (ties: newest id first), so that crew prune knows exactly
// which N runs finished last. Records that cannot be read are reported
// (problems) and left alone: they are neither counted nor removed.
func ByFinish(st *runstore.Store) ([]retention.Run, []string, error) {
	var runs []retention.Run
	var problems []string
	err := st.FinishIndex().WalkFinished(func(id record.RunID) bool {
		rec, err := st.ReadDone(id)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// pruned by someone else meanwhile
		case err != nil:
			problems = append(problems, err.Error())
		case rec.FinishedAt == nil || rec.State.Active():
			problems = append(problems, fmt.Sprintf("run record %s: a finished record without an end (state %s)", st.DonePath(id), rec.State))
		default:
			runs = append(runs, retention.Run{ID: id, Task: rec.Task, Finished: *rec.FinishedAt, Path: st.DonePath(id)})
		}
		return true
	})
	slices.SortStableFunc(runs, func(a, b retention.Run) int {
		if c := b.Finished.Compare(a.Finished); c != 0 {
			return c
		}
		return strings.Compare(string(b.ID), string(a.ID))
	})
	return runs, problems, err
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
