package recovery

import (
	"errors"
	"time"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

// Policy says which finished runs to keep; a run is removable only when
// every rule that is set lets it go (so with both, a run is kept if
// either keeps it):
//
//   - KeepNewest N keeps the newest N finished runs. Precisely: a run
//     goes only once N finished runs were created after it finished. That
//     is the N newest by creation and the N most recently finished alike
//     (a run that outlived N later ones is not removed the moment it ends),
//     and costs no more than knowing the N-th newest run's id. Negative:
//     no rule by count. Zero keeps none.
//   - OlderThan D keeps runs that finished less than D ago. Negative: no
//     rule by age. Zero keeps none.
//
// With neither rule set, nothing is removable.
type Policy struct {
	KeepNewest int
	OlderThan  time.Duration
}

// NoCountRule and NoAgeRule are KeepNewest's and OlderThan's values for
// "no rule by count", "no rule by age".
const (
	NoCountRule = -1
	NoAgeRule   = -1
)

// PolicyOf is the retention a config asks for (crew init --retain,
// --retain-for).
func PolicyOf(cfg record.Config) Policy {
	p := Policy{KeepNewest: NoCountRule, OlderThan: NoAgeRule}
	if cfg.Retain > 0 {
		p.KeepNewest = cfg.Retain
	}
	if cfg.RetainFor > 0 {
		p.OlderThan = cfg.RetainFor
	}
	return p
}

// KeepsEverything reports whether the policy removes nothing.
func (p Policy) KeepsEverything() bool { return p.KeepNewest < 0 && p.OlderThan < 0 }

// boundary is the count rule's line: runs that finished before it are
// removable by count. ok is false when no run is (fewer than N finished
// runs exist, or no count rule).
type boundary struct {
	at time.Time // the N-th newest finished run's creation
	id record.RunID
	// all: KeepNewest is 0, every run is removable by count.
	all bool
	ok  bool
}

// removable applies the policy to one finished run.
func (p Policy) removable(rec *record.Run, b boundary, now time.Time) bool {
	if p.KeepsEverything() || rec.FinishedAt == nil {
		return false
	}
	if p.KeepNewest >= 0 {
		if !b.ok {
			return false
		}
		if !b.all && (rec.RunID >= b.id || !rec.FinishedAt.Before(b.at)) {
			return false
		}
	}
	if p.OlderThan >= 0 && now.Sub(*rec.FinishedAt) < p.OlderThan {
		return false
	}
	return true
}

// countBoundary finds the N-th newest finished run by counting shards
// from the newest, from the done index where it is current.
func countBoundary(x *runstore.DoneIndex, n int) (boundary, error) {
	if n == 0 {
		return boundary{all: true, ok: true}, nil
	}
	shards, err := x.Shards()
	if err != nil {
		return boundary{}, err
	}
	seen := 0
	for i := len(shards) - 1; i >= 0; i-- {
		c, err := x.Count(shards[i])
		if err != nil {
			return boundary{}, err
		}
		if seen+c < n {
			seen += c
			continue
		}
		ids, err := x.IDs(shards[i])
		if err != nil {
			return boundary{}, err
		}
		if seen+len(ids) < n { // shrank since it was counted
			seen += len(ids)
			continue
		}
		id := ids[len(ids)-(n-seen)]
		at, err := id.CreatedAt()
		if err != nil {
			return boundary{}, err
		}
		return boundary{at: at, id: id, ok: true}, nil
	}
	return boundary{}, nil
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
// (never an active or waiting run; a removal cut short leaves a record,
// which the next prune takes). Concurrent lazy prunes may try the same
// runs; removing one twice is harmless.
func LazyPrune(st *runstore.Store, p Policy, now time.Time, lim LazyLimits) (LazyReport, error) {
	var rep LazyReport
	if p.KeepsEverything() || !st.Exists() {
		return rep, nil
	}
	x := st.OpenDoneIndex(time.Now)
	defer x.Close()
	defer x.Save()
	var b boundary
	if p.KeepNewest >= 0 {
		var err error
		if b, err = countBoundary(x, p.KeepNewest); err != nil || !b.ok {
			return rep, err
		}
	}
	shards, err := x.Shards()
	if err != nil {
		return rep, err
	}
	var touched []string
	defer func() {
		for _, sh := range touched {
			st.RemoveShardIfEmpty(sh)
		}
	}()
	for _, shard := range shards {
		if p.KeepNewest > 0 && shard > b.id.Shard() {
			return rep, nil // every run from here on was created after the boundary
		}
		if p.OlderThan >= 0 && !shardBefore(shard, now.Add(-p.OlderThan)) {
			return rep, nil // created too recently to have finished long enough ago
		}
		ids, err := x.IDs(shard)
		if err != nil {
			return rep, err
		}
		for _, id := range ids {
			if p.KeepNewest > 0 && id >= b.id {
				return rep, nil
			}
			if rep.Removed == lim.Remove || rep.Examined == lim.Examine {
				rep.More = true
				return rep, nil
			}
			rep.Examined++
			rec, err := st.ReadDone(id)
			if err != nil || !p.removable(rec, b, now) {
				continue // gone meanwhile, unreadable (crew prune reports it), or kept
			}
			failpoint.Hit("lazy-prune")
			switch err := st.RemoveFinished(id); {
			case errors.Is(err, runstore.ErrRunBusy):
				continue
			case err != nil:
				return rep, err
			}
			x.Drop(id)
			rep.Removed++
			if len(touched) == 0 || touched[len(touched)-1] != shard {
				touched = append(touched, shard)
			}
		}
	}
	return rep, nil
}

// shardBefore reports whether every run of shard (a creation hour) was
// created before t.
func shardBefore(shard string, t time.Time) bool {
	start, err := time.Parse("2006-01-02T15", shard)
	if err != nil {
		return true // not an hour: let the records decide
	}
	return !start.Add(time.Hour).After(t.UTC())
}
