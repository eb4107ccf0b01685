package finishindex_test

import (
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/storetest"
)

// The index of finished runs tells a pruned run's end; a run it does not
// list, or lists as unreadable, it does not.
func TestIndexedEndOf(t *testing.T) {
	s := newStore(t)
	rec := storetest.Finished(indexBase, indexBase.Add(time.Minute), 1, "gone", record.Failed)
	finishAsSupervisor(t, s, rec)
	if err := s.RemoveFinished(rec.RunID); err != nil {
		t.Fatal(err)
	}
	end, ok := s.FinishIndex().IndexedEndOf(rec.RunID)
	if !ok || end.Task != "gone" || end.State != record.Failed || end.Exit == nil || *end.Exit != 2 || !end.Finished.Equal(*rec.FinishedAt) {
		t.Fatalf("IndexedEndOf = %+v, %v", end, ok)
	}
	if _, ok := s.FinishIndex().IndexedEndOf(storetest.IDAt(indexBase, 99)); ok {
		t.Error("a run the index does not list has an end")
	}
}
