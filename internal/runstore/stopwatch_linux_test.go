//go:build linux

package runstore

import (
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

// A StopWatch polls until Notify: no inotify instance exists before (its
// close costs a kernel grace period, which a short run must not pay), and
// after it a stop request written the way crew stop writes it (a rename
// into owners/) wakes Changed, and Pending then returns it once.
func TestStopWatchNotifiesOnlyWhenAsked(t *testing.T) {
	s := newStore(t)
	w, err := s.WatchStopRequests(testID)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Changed() != nil {
		t.Fatal("Changed is a channel before Notify: an inotify instance was made up front")
	}
	if w.Pending() != nil {
		t.Fatal("Pending with no request")
	}
	if !w.Notify() {
		t.Fatal("Notify = false on Linux")
	}
	first := w.Changed()
	if !w.Notify() || w.Changed() != first {
		t.Fatal("a second Notify made another inotify instance")
	}
	req := &record.StopRequest{PID: 99, User: "ops", Signal: "SIGTERM", At: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), Grace: "10s"}
	if err := s.WriteStopRequest(testID, req); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Changed():
	case <-time.After(10 * time.Second): // a deadlock guard, not a timing
		t.Fatal("no wake-up for a stop request written after Notify")
	}
	if got := w.Pending(); got == nil || got.PID != 99 {
		t.Errorf("Pending = %+v, want the request", got)
	}
	if got := w.Pending(); got != nil {
		t.Errorf("Pending again = %+v, want nothing new", got)
	}
}
