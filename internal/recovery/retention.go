package recovery

import (
	"errors"
	"time"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/finishindex"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/retention"
	"github.com/crew-dev/crew/internal/runstore"
)

// creationLine is a first, cheap line for the count rule: the creation
// time of the N-th newest-created finished run, found by counting shards
// from the newest, from the done index where it is current. The N runs
// created at or after it finished at or after it, so a run that finished
// before it has N finishes after it. ok is false when fewer than N
// finished runs exist.
func creationLine(x *finishindex.DoneIndex, n int) (at time.Time, ok bool, err error) {
	shards, err := x.Shards()
	if err != nil {
		return time.Time{}, false, err
	}
	seen := 0
	for i := len(shards) - 1; i >= 0; i-- {
		c, err := x.Count(shards[i])
		if err != nil {
			return time.Time{}, false, err
		}
		if seen+c < n {
			seen += c
			continue
		}
		ids, err := x.IDs(shards[i])
		if err != nil {
			return time.Time{}, false, err
		}
		if seen+len(ids) < n { // shrank since it was counted
			seen += len(ids)
			continue
		}
		at, err := ids[len(ids)-(n-seen)].CreatedAt()
		return at, err == nil, err
	}
	return time.Time{}, false, nil
}

// LazyLimits bound what one lazy prune does.
type LazyLimits struct {
	// Remove is the most runs it removes.
	Remove int
	// Examine is the most finished records it reads.
	Examine int
}

// DefaultLazyLimits: a finish removes up to 8 expired runs (so a backlog
// drains 7 runs a finish faster than it grows by one) and reads at most
// 32 records.
var DefaultLazyLimits = LazyLimits{Remove: 8, Examine: 32}

// LazyReport is what a lazy prune did.
type LazyReport struct {
	Removed  int
	Examined int
	// More: it stopped at a limit with possibly more to remove.
	More bool
}

// LazyPrune removes at most lim.Remove finished runs that the policy lets
// go, oldest first, reading at most lim.Examine records. It is what a run
// does once it has finished (its record durable, its slot free), so it
// never holds a lock anyone waits for, and it only ever removes finished
// runs through runstore.RemoveFinished: the same safety as crew prune
// (never an active or waiting run, nor one a crew wait holds; a removal
// cut short leaves a record, which the next prune takes). Concurrent lazy
// prunes may try the same runs; removing one twice is harmless.
//
// A removable run finished before a line (lazyLine), so it was created
// before it: the prune reads the oldest shards, and in them the oldest
// runs, until it reaches runs created after the line.
func LazyPrune(st *runstore.Store, p retention.Policy, now time.Time, lim LazyLimits) (LazyReport, error) {
	var rep LazyReport
	if p.KeepsEverything() || !st.Exists() {
		return rep, nil
	}
	x := st.FinishIndex().OpenDoneIndex(time.Now)
	defer x.Close()
	defer x.Save()
	l, ok, err := newLazyLine(st, x, p, now)
	if err != nil || !ok {
		return rep, err
	}
	shards, err := x.Shards()
	if err != nil {
		return rep, err
	}
	pr := &lazyPrune{st: st, x: x, p: p, now: now, lim: lim, line: l, rep: &rep}
	defer pr.removeEmptyShards()
	for _, shard := range shards {
		if !pr.mayHold(shardStart(shard)) {
			return rep, nil // every run from here on was created after the line
		}
		ids, err := x.IDs(shard)
		if err != nil {
			return rep, err
		}
		if more, err := pr.shard(shard, ids); !more || err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// lazyPrune is one lazy prune under way.
type lazyPrune struct {
	st      *runstore.Store
	x       *finishindex.DoneIndex
	p       retention.Policy
	now     time.Time
	lim     LazyLimits
	line    *lazyLine
	rep     *LazyReport
	touched []string
}

// mayHold reports whether a run created at created may be removable: one
// created at or after the line finished after it. Runs the count line
// kept although they were created before it (they overlapped the newest
// runs, or waited in line) say the line may be too low: it is raised
// before the prune stops.
func (pr *lazyPrune) mayHold(created time.Time) bool {
	if created.Before(pr.line.before()) {
		return true
	}
	if pr.line.overlap && pr.line.raise() {
		return created.Before(pr.line.before())
	}
	return false
}

// shard examines the runs of one shard, oldest first; more is false when
// the prune is over.
func (pr *lazyPrune) shard(shard string, ids []record.RunID) (more bool, err error) {
	for _, id := range ids {
		created, err := id.CreatedAt()
		if err == nil && !pr.mayHold(created) {
			return false, nil
		}
		if pr.rep.Removed == pr.lim.Remove || pr.rep.Examined == pr.lim.Examine {
			pr.rep.More = true
			return false, nil
		}
		pr.rep.Examined++
		rec, err := pr.st.ReadDone(id)
		if err != nil || rec.FinishedAt == nil || !pr.line.lets(*rec.FinishedAt, created) {
			continue // gone meanwhile, unreadable (crew prune reports it), or kept
		}
		failpoint.Hit(failpoint.LazyPrune)
		switch err := pr.st.RemoveFinished(id); {
		case errors.Is(err, runstore.ErrRunBusy):
			continue
		case err != nil:
			return false, err
		}
		pr.x.Drop(id)
		pr.rep.Removed++
		if len(pr.touched) == 0 || pr.touched[len(pr.touched)-1] != shard {
			pr.touched = append(pr.touched, shard)
		}
	}
	return true, nil
}

func (pr *lazyPrune) removeEmptyShards() {
	for _, sh := range pr.touched {
		pr.st.RemoveShardIfEmpty(sh)
	}
}

// lazyLine is what a lazy prune knows of when a run must have finished to
// be removable: before now-D (the age rule), and before the count rule's
// line, a lower bound of the N-th newest finish. That starts as
// creationLine (cheap, from the done index) and is raised to what the
// index of finished runs proves (finishindex.NthNewestFinish) once a run the
// creation line keeps turns up: one that overlapped the newest runs, or
// waited in line (its id is as old as its place in line).
type lazyLine struct {
	st      *runstore.Store
	x       *finishindex.DoneIndex
	p       retention.Policy
	now     time.Time
	age     time.Time // runs that finished before it are old enough
	count   time.Time // runs that finished before it have N finishes after them
	raised  bool
	overlap bool // a run created before count finished after it
}

// farFuture stands for "no line": every run finished before it.
var farFuture = time.Unix(1<<62, 0)

func newLazyLine(st *runstore.Store, x *finishindex.DoneIndex, p retention.Policy, now time.Time) (*lazyLine, bool, error) {
	l := &lazyLine{st: st, x: x, p: p, now: now, age: farFuture, count: farFuture}
	if p.OlderThan >= 0 {
		l.age = now.Add(-p.OlderThan)
	}
	if p.KeepNewest > 0 {
		at, ok, err := creationLine(x, p.KeepNewest)
		if err != nil || !ok {
			return nil, false, err // fewer than N finished runs: none goes by count
		}
		l.count = at
	}
	return l, true, nil
}

// before is the time before which a run must have finished to go.
func (l *lazyLine) before() time.Time {
	if l.count.Before(l.age) {
		return l.count
	}
	return l.age
}

// lets reports whether a run created at created that finished at fin may
// go, raising the count line first if it is what keeps the run.
func (l *lazyLine) lets(fin, created time.Time) bool {
	if !fin.Before(l.count) && created.Before(l.count) {
		l.overlap = true
		if fin.Before(l.age) {
			l.raise()
		}
	}
	return l.p.Lets(fin, fin.Before(l.count), l.now)
}

// raise raises the count line to what the index of finished runs proves,
// once; it reports whether the line went up.
func (l *lazyLine) raise() bool {
	if l.raised || l.p.KeepNewest <= 0 {
		return false
	}
	l.raised = true
	at, ok, err := l.st.FinishIndex().NthNewestFinish(l.p.KeepNewest, l.x)
	if err != nil || !ok || !at.After(l.count) {
		return false
	}
	l.count = at
	return true
}

// shardStart is when the first run of shard (a creation hour) may have
// been created.
func shardStart(shard string) time.Time {
	start, err := time.Parse("2006-01-02T15", shard)
	if err != nil {
		return time.Time{} // not an hour: let the records decide
	}
	return start
}
