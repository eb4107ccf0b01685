package dispatch

import (
	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// History lists finished runs, newest finish first. It reads the index of
// finished runs and the records of the runs it returns, so its cost
// follows what it shows (and, with filters, how far back matches lie),
// not the history; it never creates or changes a file.
func (d *Dispatcher) History(q vocab.HistoryQuery) (*vocab.History, error) {
	st := d.parts()
	fq := backend.FinishedQuery{Limit: q.Limit, Since: q.Since}
	if q.Task != "" || q.Failed {
		fq.Match = func(task string, state record.State, _ *int) bool {
			return (q.Task == "" || task == q.Task) && (!q.Failed || state != record.Succeeded)
		}
	}
	entries, err := st.ListActive()
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.Finished {
			fq.Also = append(fq.Also, e.ID) // finished, maybe not indexed yet
		}
	}
	fin, more, err := d.parts().finishedRuns(fq, q.Labels)
	if err != nil {
		return nil, err
	}
	h := &vocab.History{Version: vocab.HistoryVersion, Runs: make([]vocab.RunView, 0, len(fin.Runs)), Problems: []vocab.Problem{}, Unindexed: fin.Unindexed,
		Limit: q.Limit, More: more}
	for _, r := range fin.Runs {
		h.Runs = append(h.Runs, finishedView(d.Store.Logs(), r))
	}
	h.Problems = finishedProblems(fin)
	return h, nil
}

// finishedProblems are what status and history report of a look at the
// finished runs: the records that could not be read, and what is wrong
// with the index of finished runs.
func finishedProblems(fin *backend.Finished) []vocab.Problem {
	out := []vocab.Problem{}
	for _, b := range fin.Bad {
		out = append(out, vocab.Problem{Path: b.Path, Error: b.Err.Error()})
	}
	if fin.IndexProblem != "" {
		out = append(out, vocab.Problem{Path: fin.IndexPath, Error: fin.IndexProblem})
	}
	return out
}
