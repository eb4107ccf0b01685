package dispatch

import (
	"slices"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
)

// finishedRuns is the store's FinishedRuns, newest finish first, of the
// runs that also carry every one of labels, and whether more than
// q.Limit runs match. No store's index of finished runs knows labels, so
// they are matched here on the records read: the store is asked for
// more runs, four times as many each time, until enough carry the labels
// or none are left (reading about as many records as it takes to find
// them, and at most four times that).
func (p parts) finishedRuns(q backend.FinishedQuery, labels record.Labels) (*backend.Finished, bool, error) {
	limit := q.Limit
	if limit > 0 {
		q.Limit = limit + 1 // one more tells whether more match
	}
	for {
		fin, err := p.FinishedRuns(q)
		if err != nil {
			return nil, false, err
		}
		// Fewer than asked for (counting the records that could not be
		// read, which a store may count against the limit): none are left.
		exhausted := q.Limit == 0 || len(fin.Runs)+len(fin.Bad) < q.Limit
		fin.Runs = slices.DeleteFunc(fin.Runs, func(r *record.Run) bool { return !r.Labels.Has(labels) })
		if limit == 0 || len(fin.Runs) > limit || exhausted {
			more := limit > 0 && len(fin.Runs) > limit
			if more {
				fin.Runs = fin.Runs[:limit]
			}
			return fin, more, nil
		}
		q.Limit *= 4
	}
}

// Labelled lists every run that carries all of labels (at least one
// label): the waiting starts, the active runs and the finished ones, in
// the order they were created, for crew wait --label. The queue is read
// first, then the active set, then the finished runs, so that a run that
// moves from one to the next meanwhile is found in one of them.
func (d *Dispatcher) Labelled(labels record.Labels) ([]record.RunID, error) {
	line, err := d.liveQueue(nil)
	if err != nil {
		return nil, err
	}
	var ids []record.RunID
	for _, t := range line.tickets {
		if !t.Unreadable && line.labels[t.ID].Has(labels) {
			ids = append(ids, t.ID)
		}
	}
	set, err := d.readActive(false, nil)
	if err != nil {
		return nil, err
	}
	q := backend.FinishedQuery{}
	for _, e := range set.entries {
		switch {
		case e.Finished:
			q.Also = append(q.Also, e.ID) // finished, maybe not indexed yet
		case e.Err == nil && e.Rec.Labels.Has(labels):
			ids = append(ids, e.ID)
		}
	}
	fin, _, err := d.parts().finishedRuns(q, labels)
	if err != nil {
		return nil, err
	}
	for _, r := range fin.Runs {
		ids = append(ids, r.RunID)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}
