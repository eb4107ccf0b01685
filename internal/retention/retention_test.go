package retention

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Lets: a run goes only when every rule that is set lets it go.
func TestLets(t *testing.T) {
	old, young := now.Add(-48*time.Hour), now.Add(-time.Minute)
	for _, c := range []struct {
		name    string
		p       Policy
		fin     time.Time
		byCount bool
		want    bool
	}{
		{"no rule keeps everything", Policy{NoCountRule, NoAgeRule}, old, true, false},
		{"count: N finished after it", Policy{5, NoAgeRule}, young, true, true},
		{"count: among the newest N", Policy{5, NoAgeRule}, old, false, false},
		{"age: older than D", Policy{NoCountRule, time.Hour}, old, false, true},
		{"age: younger than D", Policy{NoCountRule, time.Hour}, young, true, false},
		{"both: the count keeps it", Policy{5, time.Hour}, old, false, false},
		{"both: the age keeps it", Policy{5, time.Hour}, young, true, false},
		{"both let it go", Policy{5, time.Hour}, old, true, true},
		{"keep none", Policy{0, NoAgeRule}, young, true, true},
	} {
		if got := c.p.Lets(c.fin, c.byCount, now); got != c.want {
			t.Errorf("%s: Lets = %v, want %v", c.name, got, c.want)
		}
	}
	if !PolicyOf(record.Config{}).KeepsEverything() {
		t.Error("a config without retention keeps everything")
	}
	if p := PolicyOf(record.Config{Retain: 3, RetainFor: time.Hour}); p != (Policy{3, time.Hour}) {
		t.Errorf("PolicyOf = %+v", p)
	}
}

// fakeFinished is a store's finished runs, newest finish first.
type fakeFinished struct {
	runs    []Run
	held    map[record.RunID]bool
	removed []record.RunID
	after   []record.RunID
	called  bool
}

func (f *fakeFinished) ByFinish() ([]Run, []string, error) {
	return f.runs, []string{"one unreadable"}, nil
}
func (f *fakeFinished) Remove(id record.RunID, dry bool) (int64, error) {
	if f.held[id] {
		return 0, fmt.Errorf("run %s: %w", id, ErrHeld)
	}
	if !dry {
		f.removed = append(f.removed, id)
	}
	return 10, nil
}
func (f *fakeFinished) AfterPrune(removed []record.RunID) { f.called, f.after = true, removed }

// Prune counts runs newest finish first, keeps a held run, reports the
// store's problems, and tidies only when it was no dry run.
func TestPrune(t *testing.T) {
	var runs []Run
	for i := range 6 {
		runs = append(runs, Run{ID: record.RunID(fmt.Sprint("r", i)), Finished: now.Add(-time.Duration(i) * time.Hour)})
	}
	f := &fakeFinished{runs: runs, held: map[record.RunID]bool{"r4": true}}
	rep, err := Prune(f, Policy{2, NoAgeRule}, now, true)
	if err != nil || len(rep.Removed) != 3 || rep.Kept != 3 || f.called || len(f.removed) != 0 {
		t.Fatalf("dry run: %+v, %v, after %v, removed %v", rep, err, f.called, f.removed)
	}
	rep, err = Prune(f, Policy{2, NoAgeRule}, now, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []record.RunID{"r2", "r3", "r5"}; !slices.Equal(f.removed, want) || !slices.Equal(f.after, want) {
		t.Errorf("removed %v, tidied after %v; want %v", f.removed, f.after, want)
	}
	if rep.Kept != 3 || len(rep.Errors) != 1 || rep.Removed[0].Bytes != 10 {
		t.Errorf("report %+v", rep)
	}
	if !errors.Is(fmt.Errorf("x: %w", ErrHeld), ErrHeld) {
		t.Error("ErrHeld does not wrap")
	}
}
