package dispatch

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// Lookup reads a RUN|TASK argument. In this order, it is:
//
//  1. a whole run id: that run, or that waiting start;
//  2. the beginning of a run id ("r-" and a digit, which no new task name
//     may begin with): the one run or waiting start whose id begins so;
//  3. the name of a task that has runs (active, waiting or finished): the
//     task;
//  4. a short id (4 to 16 lowercase hex digits, as crew shows runs:
//     3f2a9c0d): the one run or waiting start whose id's random part
//     begins so;
//  5. else the name of a task (that has no runs yet).
//
// An id prefix or short id that fits several runs is a usage error that
// lists them (*AmbiguousError); one that fits none is *NotFoundError.
//
// Every lookup reads the line before the runs: a waiting start's ticket
// goes only once its record is written (admitted, or gone from the line
// with its outcome), so a start admitted meanwhile is found in one or the
// other. The other order found it in neither, and crew wait said there
// was no such run.
func (d *Dispatcher) Lookup(arg string) (vocab.Ref, error) {
	st := d.parts()
	if record.LooksLikeRunID(arg) {
		id := record.RunID(arg)
		waiting := st.HasTicket(id)
		failpoint.Hit(failpoint.Resolving)
		_, err := st.ReadRun(id)
		if err == nil || waiting {
			return vocab.Ref{Run: id}, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return vocab.Ref{}, err // unreadable, or a state root crew refuses: not "no such run"
		}
		return vocab.Ref{}, &vocab.NotFoundError{Err: fmt.Errorf("no run %s in %s", arg, d.Store.Where())}
	}
	if record.IsRunIDShaped(arg) {
		id, err := d.findRun(arg, func(id record.RunID) bool { return strings.HasPrefix(string(id), arg) })
		var nf *vocab.NotFoundError
		if !errors.As(err, &nf) || record.ValidateTask(arg) != nil {
			return vocab.Ref{Run: id}, err
		}
		if has, herr := d.taskHasRuns(arg); herr != nil || !has {
			return vocab.Ref{}, err // not a run, and no (older crew's) task of that name either
		}
		return vocab.Ref{Task: arg}, nil
	}
	if err := record.ValidateTask(arg); err != nil {
		return vocab.Ref{}, vocab.Usagef("invalid task name: %w", err)
	}
	if !record.IsShortID(arg) {
		return vocab.Ref{Task: arg}, nil
	}
	if has, err := d.taskHasRuns(arg); err != nil || has {
		return vocab.Ref{Task: arg}, err
	}
	id, err := d.findRun(arg, func(id record.RunID) bool { return id.HasShort(arg) })
	var nf *vocab.NotFoundError
	if errors.As(err, &nf) {
		return vocab.Ref{Task: arg}, nil
	}
	return vocab.Ref{Run: id}, err
}

// Resolve turns a RUN|TASK argument (see Lookup) into a run id: a task
// means its active run, else its oldest waiting start, else its latest
// finished run.
func (d *Dispatcher) Resolve(arg string) (record.RunID, error) {
	ref, err := d.Lookup(arg)
	if err != nil || ref.Run != "" {
		return ref.Run, err
	}
	id, err := d.latestOf(ref.Task)
	if err != nil {
		return "", err
	}
	if id == "" {
		return "", &vocab.NotFoundError{Err: fmt.Errorf("task %q has no runs in %s", ref.Task, d.Store.Where())}
	}
	return id, nil
}

// latestOf is the task's active run, else its oldest waiting start, else
// its latest finished run ("" if it has none).
func (d *Dispatcher) latestOf(task string) (record.RunID, error) {
	st := d.parts()
	queue, _ := d.liveQueue(nil) // unreadable: no waiting start to find there; read first (Lookup)
	failpoint.Hit(failpoint.Resolving)
	entries, err := st.ListActive()
	if err != nil {
		return "", err
	}
	var leftovers []record.RunID
	for _, e := range entries {
		if e.Rec != nil && !e.Finished && e.Rec.Task == task {
			return e.ID, nil
		}
		if e.Finished {
			leftovers = append(leftovers, e.ID)
		}
	}
	for _, t := range queue.tickets {
		if t.Task == task {
			return t.ID, nil
		}
	}
	// A task has one run at a time: its latest finish is its latest run.
	fin, err := st.FinishedRuns(backend.FinishedQuery{Limit: 1, Also: leftovers,
		Match: func(t string, _ record.State, _ *int) bool { return t == task }})
	if err != nil {
		return "", err
	}
	if len(fin.Runs) == 1 {
		return fin.Runs[0].RunID, nil
	}
	return "", nil
}

func (d *Dispatcher) taskHasRuns(task string) (bool, error) {
	id, err := d.latestOf(task)
	return id != "", err
}

// maxCandidates is how many runs an ambiguous argument's error lists.
const maxCandidates = 8

// findRun finds the one run or waiting start whose id match accepts.
func (d *Dispatcher) findRun(arg string, match func(record.RunID) bool) (record.RunID, error) {
	st := d.parts()
	var cands []vocab.Candidate
	seen := map[record.RunID]bool{}
	add := func(c vocab.Candidate) {
		if !seen[c.ID] {
			seen[c.ID] = true
			cands = append(cands, c)
		}
	}
	queue, _ := d.liveQueue(nil) // unreadable: no waiting start to find there; read first (Lookup)
	failpoint.Hit(failpoint.Resolving)
	entries, err := st.ListActive()
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.ID != "" && e.Rec != nil && !e.Finished && match(e.ID) {
			add(vocab.Candidate{ID: e.ID, Task: e.Rec.Task, State: string(e.Rec.State)})
		}
	}
	for _, t := range queue.tickets {
		if match(t.ID) {
			add(vocab.Candidate{ID: t.ID, Task: t.Task, State: "waiting"})
		}
	}
	refs, total, err := st.FinishedMatching(match, maxCandidates)
	if err != nil {
		return "", err
	}
	more := 0
	for _, r := range refs {
		add(vocab.Candidate{ID: r.ID, Task: r.Task, State: string(r.State)})
	}
	more = total - len(refs)
	switch {
	case len(cands) == 1 && more == 0:
		return cands[0].ID, nil
	case len(cands) == 0:
		return "", &vocab.NotFoundError{Err: fmt.Errorf("no run's id begins with %s in %s", arg, d.Store.Where())}
	}
	if len(cands) > maxCandidates {
		more += len(cands) - maxCandidates
		cands = cands[:maxCandidates]
	}
	return "", &vocab.AmbiguousError{Arg: arg, Candidates: cands, More: more}
}

// TaskOf is the task of a run or waiting start, for messages; "" if
// neither can be read.
func (d *Dispatcher) TaskOf(id record.RunID) string {
	if rec, err := d.runs().ReadRun(id); err == nil {
		return rec.Task
	}
	entries, _ := d.queue().ListTickets()
	for _, e := range entries {
		if e.ID == id && e.Ticket != nil {
			return e.Ticket.Task
		}
	}
	return ""
}
