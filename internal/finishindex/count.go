package finishindex

import (
	"os"
	"slices"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/stateroot"
)

// NthNewestFinish proves a line for retention by count (keep the n runs
// that finished last): at least n runs whose finished records exist now
// finished at or after at, so a run that finished before at is not among
// the n that finished last. ok is false when it cannot prove one (no
// usable index, fewer than n runs, or an index that names many runs whose
// records are gone or changed: compactions and crew recover mend it). x
// counts the finished runs by shard.
//
// The index gives a candidate, the n-th latest finish it lists, without
// touching a record. The proof counts the runs that finished at or after
// it: every run created at or after the candidate (it cannot have finished
// earlier), counted by shard from the done index as the creation line of
// retention is; and each run created before it that the index says
// finished after it (it overlapped the newest runs, or waited in line),
// proven one by one: its record exists (one stat) and has not changed
// since it was indexed (else it is read). So its cost is the index entries
// it reads (about n, see indexWalk), the done index's shards back to the
// candidate, and a stat for each overlapping run; and what it proves is
// never above the truth: a run that should be kept is never let go.
func (ix *Index) NthNewestFinish(n int, x *DoneIndex) (at time.Time, ok bool, err error) {
	if n <= 0 {
		return time.Time{}, false, nil
	}
	p := &finishProver{ix: ix, dirs: map[string]*os.Root{}}
	defer p.close()
	// Runs the index lists that cannot be proven (removed or changed by
	// hand since) leave the count short: the candidate is then taken that
	// many entries further back, a few times at most.
	for want, try := n, 0; try < 4; try++ {
		top, err := ix.latestEntries(want)
		if err != nil || len(top) < want {
			return time.Time{}, false, err
		}
		line := top[want-1].fin
		count, err := x.CountCreatedSince(line)
		if err != nil {
			return time.Time{}, false, err
		}
		for _, e := range top {
			if created, err := e.id.CreatedAt(); err == nil && created.Before(line) && p.finishedSince(e, line) {
				count++
			}
		}
		if count >= n {
			return line, true, nil
		}
		want += n - count
	}
	return time.Time{}, false, nil
}

// latestEntry is what NthNewestFinish keeps of an index entry.
type latestEntry struct {
	id      record.RunID
	fin     time.Time
	written time.Time
}

// latestEntries walks the index from its newest entry back and returns the
// n latest finishes it lists (each run's newest entry counts), latest
// first; none without a usable index.
func (ix *Index) latestEntries(n int) ([]latestEntry, error) {
	f, size, _ := ix.openIndex()
	if f == nil {
		return nil, nil
	}
	defer f.Close()
	var top []latestEntry
	seen := map[record.RunID]bool{}
	full := func() bool { return len(top) >= n }
	var w indexWalk
	err := w.walk(f, size, func(r rawEntry) bool {
		id := record.RunID(r.id)
		if seen[id] {
			return true
		}
		seen[id] = true
		fin := r.finishedAt()
		if !finalState(r.stateOf()) || !record.WellFormedRunID(string(id)) || (full() && !fin.After(top[n-1].fin)) {
			return true
		}
		e := latestEntry{id: id, fin: fin, written: time.Unix(0, r.written)}
		i, _ := slices.BinarySearchFunc(top, e, func(a, b latestEntry) int { return b.fin.Compare(a.fin) })
		top = slices.Insert(top, i, e)
		if len(top) > n {
			top = top[:n]
		}
		return true
	}, func(stamp time.Time) bool { return full() && stamp.Add(indexSkew).Before(top[n-1].fin) })
	return top, err
}

// finishProver proves runs' finishes from their records, each shard
// directory opened once.
type finishProver struct {
	ix   *Index
	dirs map[string]*os.Root
}

func (p *finishProver) close() {
	for _, d := range p.dirs {
		if d != nil {
			d.Close()
		}
	}
}

// finishedSince reports whether e's run has a finished record that says
// it finished at or after line: the entry says so, and the record exists
// and has not changed since the entry was written, or the record, read,
// says so.
func (p *finishProver) finishedSince(e latestEntry, line time.Time) bool {
	sh := e.id.Shard()
	dir, ok := p.dirs[sh]
	if !ok {
		dir, _ = p.ix.done.Open(e.id.Shard()) // none: pruned, or never there
		p.dirs[sh] = dir
	}
	if dir == nil {
		return false
	}
	fi, _, err := stateroot.StatRecord(dir, e.id)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	if !fi.ModTime().After(e.written.Add(changeSlack)) {
		return !e.fin.Before(line)
	}
	rec, err := p.ix.recs.ReadDone(e.id)
	return err == nil && !rec.State.Active() && rec.FinishedAt != nil && !rec.FinishedAt.Before(line)
}

// finalState reports whether st is a state a finished run can be in.
func finalState(st record.State) bool {
	switch st {
	case record.Succeeded, record.Failed, record.Stopped, record.Interrupted:
		return true
	}
	return false
}

// CountCreatedSince counts the finished runs created at or after t: every
// run of the shards (creation hours) that begin at or after t, from the
// done index where it is current, and those of the hour t falls in,
// listed.
func (x *DoneIndex) CountCreatedSince(t time.Time) (int, error) {
	shards, err := x.Shards()
	if err != nil {
		return 0, err
	}
	hour := t.UTC().Truncate(time.Hour).Format("2006-01-02T15")
	count := 0
	for i := len(shards) - 1; i >= 0 && strings.Compare(shards[i], hour) >= 0; i-- {
		if _, err := time.Parse("2006-01-02T15", shards[i]); err != nil {
			continue // not an hour: no record of crew's can be read there
		}
		if shards[i] != hour {
			c, err := x.Count(shards[i])
			if err != nil {
				return 0, err
			}
			count += c
			continue
		}
		ids, err := x.IDs(shards[i])
		if err != nil {
			return 0, err
		}
		for _, id := range ids {
			if created, err := id.CreatedAt(); err == nil && !created.Before(t) {
				count++
			}
		}
	}
	return count, nil
}
