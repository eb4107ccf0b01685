package recovery

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/retention"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// base is the fixtures' clock: runs are created from here on.
var base = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

func newStore(t testing.TB) *runstore.Store {
	t.Helper()
	st := runstore.New(filepath.Join(t.TempDir(), "state"))
	if err := st.Ensure(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// finished writes a finished run created at created and finished at
// finished, with a log, as an outsider would (no fsyncs, for speed).
func finished(t testing.TB, st *runstore.Store, n int, created, finished time.Time) record.RunID {
	t.Helper()
	id := record.RunID(fmt.Sprintf("r-%s-%016x", created.UTC().Format("20060102T150405.000000000Z"), n))
	code := 0
	rec := &record.Run{Version: record.RecordVersion, RunID: id, Task: fmt.Sprintf("t%d", n), State: record.Succeeded,
		Command: []string{"true"}, Host: "h", CreatedAt: created, StartedAt: &created, FinishedAt: &finished, ExitCode: &code}
	b, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := st.DonePath(id)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(st.Logs().LogPath(id), []byte("output\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return id
}

// remaining lists the finished runs, oldest first, and checks that every
// log belongs to one of them.
func remaining(t testing.TB, st *runstore.Store) []record.RunID {
	t.Helper()
	var ids []record.RunID
	if err := st.FinishIndex().WalkFinished(func(id record.RunID) bool { ids = append(ids, id); return true }); err != nil {
		t.Fatal(err)
	}
	slices.Reverse(ids)
	logs, err := os.ReadDir(filepath.Join(st.Root(), "logs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		id := record.RunID(strings.TrimSuffix(strings.TrimSuffix(l.Name(), ".log"), ".tail"))
		if !slices.Contains(ids, id) {
			t.Errorf("orphaned log %s", l.Name())
		}
	}
	return ids
}

// localFinished is a state root's finished runs, as crew prune removes
// them (retention.Prune).
type localFinished struct{ st *runstore.Store }

func (l localFinished) ByFinish() ([]retention.Run, []string, error) { return ByFinish(l.st) }
func (l localFinished) Remove(id record.RunID, dry bool) (int64, error) {
	return RemoveFinished(l.st, id, dry)
}
func (l localFinished) AfterPrune(removed []record.RunID) { AfterPrune(l.st, removed) }

// fullPrune is crew prune on st.
func fullPrune(st *runstore.Store, p retention.Policy, now time.Time, dry bool) (*vocab.PruneReport, error) {
	return retention.Prune(localFinished{st}, p, now, dry)
}

func keepNewest(n int) retention.Policy {
	return retention.Policy{KeepNewest: n, OlderThan: retention.NoAgeRule}
}

// prune runs lazy prunes until one removes nothing, as finishing runs
// would, and checks each one kept to its bounds.
func pruneLazily(t testing.TB, st *runstore.Store, p retention.Policy, now time.Time) (calls int) {
	t.Helper()
	for {
		rep, err := LazyPrune(st, p, now, DefaultLazyLimits)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Removed > DefaultLazyLimits.Remove || rep.Examined > DefaultLazyLimits.Examine {
			t.Fatalf("a lazy prune removed %d and read %d records, over its limits", rep.Removed, rep.Examined)
		}
		calls++
		if rep.Removed == 0 {
			return calls
		}
	}
}

// Sequential runs over several hours: a lazy prune keeps exactly the
// newest N, removes at most its bound per call, oldest first, records and
// logs, and empty shards go.
func TestLazyPruneKeepsTheNewestN(t *testing.T) {
	st := newStore(t)
	var ids []record.RunID
	for i := range 100 {
		c := base.Add(time.Duration(i) * 5 * time.Minute)
		ids = append(ids, finished(t, st, i, c, c.Add(time.Minute)))
	}
	rep, err := LazyPrune(st, keepNewest(10), base.Add(24*time.Hour), DefaultLazyLimits)
	if err != nil || rep.Removed != DefaultLazyLimits.Remove || !rep.More {
		t.Fatalf("first lazy prune: %+v, %v; want %d removed and more to do", rep, err, DefaultLazyLimits.Remove)
	}
	if got := remaining(t, st); !slices.Equal(got, ids[DefaultLazyLimits.Remove:]) {
		t.Errorf("the oldest go first: %d left, starting %s", len(got), got[0])
	}
	calls := pruneLazily(t, st, keepNewest(10), base.Add(24*time.Hour))
	if got := remaining(t, st); !slices.Equal(got, ids[90:]) {
		t.Errorf("kept %d runs, want the newest 10", len(got))
	}
	if calls > 90/DefaultLazyLimits.Remove+2 {
		t.Errorf("took %d lazy prunes", calls)
	}
	shards, _ := os.ReadDir(filepath.Join(st.Root(), "runs", "done"))
	want := map[string]bool{}
	for _, id := range ids[90:] {
		want[id.Shard()] = true
	}
	if len(shards) != len(want) {
		t.Errorf("%d shards left, want %d; the emptied ones should go", len(shards), len(want))
	}
}

// indexed brings the index of finished runs up to date with the records
// the fixtures wrote, as their finishes would have (in finish order).
func indexed(t testing.TB, st *runstore.Store) {
	t.Helper()
	if _, err := st.FinishIndex().CheckIndex(false); err != nil {
		t.Fatal(err)
	}
}

// A run that started before N others and ended after them is among the N
// that finished last: it is not removed the moment it ends. It goes once
// N runs finished after it.
func TestLazyPruneKeepsALongRunThatEndedLast(t *testing.T) {
	st := newStore(t)
	long := finished(t, st, 0, base, base.Add(3*time.Hour))
	var short []record.RunID
	for i := 1; i <= 20; i++ {
		c := base.Add(time.Duration(i) * 5 * time.Minute)
		short = append(short, finished(t, st, i, c, c.Add(time.Minute)))
	}
	indexed(t, st)
	pruneLazily(t, st, keepNewest(5), base.Add(4*time.Hour))
	if got := remaining(t, st); !slices.Equal(got, append([]record.RunID{long}, short[16:]...)) {
		t.Fatalf("kept %v; want the long run and the 4 that finished last before it", got)
	}
	// Five more runs, finished after the long one.
	for i := 21; i <= 25; i++ {
		c := base.Add(3*time.Hour + time.Duration(i)*time.Minute)
		finished(t, st, i, c, c.Add(time.Second))
	}
	indexed(t, st)
	pruneLazily(t, st, keepNewest(5), base.Add(5*time.Hour))
	got := remaining(t, st)
	if slices.Contains(got, long) || len(got) != 5 {
		t.Errorf("kept %d runs (long run kept: %v); want the newest 5 only", len(got), slices.Contains(got, long))
	}
}

// Runs that waited in line were created when they joined it, all at
// once, and finished one after another: retention by count keeps the N
// that finished last, lazily (each prune within its bounds) and in full.
// Counting by creation kept them all: none had N runs created after its
// finish.
func TestRetentionCountsRunsThatWaitedInLineByFinish(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprintf("crew prune=%v", full), func(t *testing.T) {
			st := newStore(t)
			var ids []record.RunID
			for i := range 40 {
				joined := base.Add(time.Duration(i) * time.Millisecond)
				ids = append(ids, finished(t, st, i, joined, base.Add(time.Duration(i+1)*time.Minute)))
			}
			indexed(t, st)
			now := base.Add(time.Hour)
			if full {
				rep, err := fullPrune(st, keepNewest(5), now, false)
				if err != nil || len(rep.Removed) != 35 || rep.Kept != 5 {
					t.Fatalf("prune: %d removed, %d kept, %v; want 35 and 5", len(rep.Removed), rep.Kept, err)
				}
			} else {
				pruneLazily(t, st, keepNewest(5), now)
			}
			if got := remaining(t, st); !slices.Equal(got, ids[35:]) {
				t.Errorf("kept %d runs (%v); want the 5 that finished last", len(got), got)
			}
		})
	}
}

// The line is proven, never believed: entries of runs whose records are
// gone, and records changed after they were indexed, count for what the
// records say. Here the 5 newest entries name runs removed by hand, and a
// record rewritten with an early finish: the 5 that finish last among the
// records that are there are kept.
func TestLazyPruneCountsOnlyWhatTheRecordsProve(t *testing.T) {
	st := newStore(t)
	var ids []record.RunID
	for i := range 30 {
		joined := base.Add(time.Duration(i) * time.Millisecond)
		ids = append(ids, finished(t, st, i, joined, base.Add(time.Duration(i+1)*time.Minute)))
	}
	indexed(t, st)
	for _, id := range ids[25:] {
		for _, p := range []string{st.DonePath(id), st.Logs().LogPath(id)} {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Run 24 now says it finished first of all (written after it was
	// indexed, so its record, not its entry, counts).
	early := finished(t, st, 24, base.Add(24*time.Millisecond), base.Add(30*time.Second))
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(st.DonePath(early), later, later); err != nil {
		t.Fatal(err)
	}
	pruneLazily(t, st, keepNewest(5), base.Add(time.Hour))
	if got := remaining(t, st); !slices.Equal(got, ids[19:24]) {
		t.Errorf("kept %v; want runs 19..23, the 5 that finished last of those there", got)
	}
}

// By age, a lazy prune removes the runs that finished more than D ago as
// soon as they did, not once their creation hour has wholly gone by.
func TestLazyPruneByAgeIsNotAnHourLate(t *testing.T) {
	st := newStore(t)
	old := finished(t, st, 0, base.Add(10*time.Second), base.Add(20*time.Second))
	young := finished(t, st, 1, base.Add(30*time.Second), base.Add(40*time.Second))
	now := base.Add(20*time.Second + time.Minute + time.Second) // old finished a minute and a second ago
	pruneLazily(t, st, retention.Policy{KeepNewest: retention.NoCountRule, OlderThan: time.Minute}, now)
	if got := remaining(t, st); !slices.Equal(got, []record.RunID{young}) {
		t.Errorf("kept %v; want only %s (%s finished more than a minute ago)", got, young, old)
	}
}

// By age: runs that finished longer ago than D go; a run created long ago
// that finished recently stays.
func TestLazyPruneByAge(t *testing.T) {
	st := newStore(t)
	now := base.Add(48 * time.Hour)
	var old, young []record.RunID
	for i := range 30 {
		c := base.Add(time.Duration(i) * time.Hour)
		id := finished(t, st, i, c, c.Add(time.Minute))
		if now.Sub(c.Add(time.Minute)) >= 24*time.Hour {
			old = append(old, id)
		} else {
			young = append(young, id)
		}
	}
	lateFinisher := finished(t, st, 99, base.Add(30*time.Minute), now.Add(-time.Hour))
	pruneLazily(t, st, retention.Policy{KeepNewest: retention.NoCountRule, OlderThan: 24 * time.Hour}, now)
	got := remaining(t, st)
	want := append([]record.RunID{lateFinisher}, young...)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("kept %d runs, want %d (the young ones and the late finisher); removed %d old", len(got), len(want), len(old))
	}
}

// With both rules, a run goes only when both let it go.
func TestLazyPruneBothRules(t *testing.T) {
	st := newStore(t)
	now := base.Add(80 * time.Hour)
	var ids []record.RunID
	for i := range 40 {
		c := base.Add(time.Duration(i) * 2 * time.Hour) // the last 12 finished within a day
		ids = append(ids, finished(t, st, i, c, c.Add(time.Minute)))
	}
	p := retention.Policy{KeepNewest: 20, OlderThan: 24 * time.Hour}
	pruneLazily(t, st, p, now)
	if got := remaining(t, st); !slices.Equal(got, ids[20:]) {
		t.Errorf("kept %d; want the newest 20 (more than the day's 12)", len(got))
	}
	p = retention.Policy{KeepNewest: 5, OlderThan: 24 * time.Hour}
	pruneLazily(t, st, p, now)
	var young int
	for _, id := range ids {
		at, _ := id.CreatedAt()
		if now.Sub(at.Add(time.Minute)) < 24*time.Hour {
			young++
		}
	}
	if got := remaining(t, st); len(got) != young || young <= 5 {
		t.Errorf("kept %d; want the %d of the last day (more than 5)", len(got), young)
	}
}

// With no rule, or fewer runs than N, nothing goes.
func TestLazyPruneRemovesNothingItShouldNot(t *testing.T) {
	st := newStore(t)
	for i := range 10 {
		c := base.Add(time.Duration(i) * time.Minute)
		finished(t, st, i, c, c.Add(time.Second))
	}
	for _, p := range []retention.Policy{{KeepNewest: retention.NoCountRule, OlderThan: retention.NoAgeRule}, keepNewest(10), keepNewest(50),
		{KeepNewest: retention.NoCountRule, OlderThan: 1000 * time.Hour}} {
		rep, err := LazyPrune(st, p, base.Add(time.Hour), DefaultLazyLimits)
		if err != nil || rep.Removed != 0 {
			t.Errorf("policy %+v: %+v, %v", p, rep, err)
		}
	}
	if n := len(remaining(t, st)); n != 10 {
		t.Errorf("%d runs left of 10", n)
	}
}

// The finished record whose active file still exists (a finalization cut
// short) is never removed: it stands for a run recovery has yet to see.
func TestLazyPruneLeavesARunStillInTheActiveSet(t *testing.T) {
	st := newStore(t)
	first := finished(t, st, 0, base, base.Add(time.Second))
	for i := 1; i < 5; i++ {
		c := base.Add(time.Duration(i) * time.Minute)
		finished(t, st, i, c, c.Add(time.Second))
	}
	if err := os.WriteFile(st.ActivePath(first), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	pruneLazily(t, st, keepNewest(1), base.Add(time.Hour))
	got := remaining(t, st)
	if len(got) != 2 || got[0] != first {
		t.Errorf("left %v; want the run still in the active set, and the newest", got)
	}
}

// crew prune with the configured policy applies it in full and refreshes
// the done index; with flags, the same rules.
func TestPruneAppliesThePolicyInFull(t *testing.T) {
	st := newStore(t)
	var ids []record.RunID
	for i := range 60 {
		c := base.Add(time.Duration(i) * 7 * time.Minute)
		ids = append(ids, finished(t, st, i, c, c.Add(time.Minute)))
	}
	rep, err := fullPrune(st, keepNewest(15), base.Add(24*time.Hour), true)
	if err != nil || len(rep.Removed) != 45 || rep.Kept != 15 {
		t.Fatalf("dry run: %d removed, %d kept, %v", len(rep.Removed), rep.Kept, err)
	}
	if n := len(remaining(t, st)); n != 60 {
		t.Fatalf("a dry run removed runs: %d left", n)
	}
	settle(t, st) // as an hour later: the index remembers settled shards only
	rep, err = fullPrune(st, keepNewest(15), base.Add(24*time.Hour), false)
	if err != nil || len(rep.Removed) != 45 {
		t.Fatalf("prune: %+v, %v", rep, err)
	}
	if got := remaining(t, st); !slices.Equal(got, ids[45:]) {
		t.Errorf("kept %d runs; want the newest 15", len(got))
	}
	if _, err := os.Stat(filepath.Join(st.Root(), "runs", "done.index")); err != nil {
		t.Errorf("the done index was not refreshed: %v", err)
	}
}

// What a lazy prune adds to a finish: the run just finished makes one run
// expire, and the lazy prune removes it. With retention N, on a state
// root of N finished runs spread over hour-shards (as with a run every
// few minutes), with the done index warm as it is in use.
func BenchmarkLazyPrune(b *testing.B) {
	for _, bc := range []struct {
		retain, perHour int
	}{{20, 12}, {1000, 12}, {10000, 12}, {10000, 1000}} {
		b.Run(fmt.Sprintf("retain=%d/runs-per-hour=%d", bc.retain, bc.perHour), func(b *testing.B) {
			st := newStore(b)
			step := time.Hour / time.Duration(bc.perHour)
			n := 0
			add := func() {
				c := base.Add(time.Duration(n) * step)
				finished(b, st, n, c, c.Add(step/2))
				n++
			}
			for range bc.retain {
				add()
			}
			// Settle the fixture's shards, as an hour later they would be,
			// and warm the index as the finishes before would have.
			settle(b, st)
			if _, err := LazyPrune(st, keepNewest(bc.retain), base, DefaultLazyLimits); err != nil {
				b.Fatal(err)
			}
			now := base.Add(time.Duration(n+b.N+10) * step)
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				add()
				b.StartTimer()
				rep, err := LazyPrune(st, keepNewest(bc.retain), now, DefaultLazyLimits)
				if err != nil || rep.Removed != 1 {
					b.Fatalf("%+v, %v", rep, err)
				}
			}
		})
	}
}

// settle backdates every shard's modification time, so that the done
// index remembers them (as it would once they are a few seconds old).
func settle(tb testing.TB, st *runstore.Store) {
	tb.Helper()
	done := filepath.Join(st.Root(), "runs", "done")
	shards, err := os.ReadDir(done)
	if err != nil {
		tb.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, sh := range shards {
		if err := os.Chtimes(filepath.Join(done, sh.Name()), old, old); err != nil {
			tb.Fatal(err)
		}
	}
}
