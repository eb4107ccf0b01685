package dispatch

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// Issue 23, item 12: an attempt that cannot list the queue decides
// nothing. A start not yet in line is refused with why; a waiting start
// keeps its place and retries, saying why it cannot be decided.
func TestUnreadableQueueDecidesNothing(t *testing.T) {
	d := New(filepath.Join(t.TempDir(), "state"))
	qErr := &vocab.QueueError{Path: "/r/queue", Err: errors.New("list the queue in /r/queue: input/output error")}
	req := vocab.AdmitRequest{Task: "t", Wait: true}

	res, ar, err := (&admitter{d: d, req: req}).unreadableQueue(nil, qErr)
	if res != nil || ar != nil || !errors.Is(err, qErr) {
		t.Fatalf("newcomer: %v, %v, %v; want the queue's error", res, ar, err)
	}
	for _, want := range []string{"not admitted: crew cannot tell whether waiting starts are owed the free slots, so nothing was recorded: ",
		"cannot read the queue of waiting starts (list the queue in /r/queue: input/output error)", "Fix: make /r/queue a directory crew can list"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}

	res, ar, err = (&admitter{d: d, req: req}).unreadableQueue(idleWaiter{}, qErr)
	if res != nil || err != nil || ar == nil {
		t.Fatalf("waiter: %v, %v, %v; want it to keep waiting", res, ar, err)
	}
	if ar.verdict.Admit || ar.verdict.Reason != admission.WaitQueue || ar.undecided() != qErr {
		t.Errorf("waiter's attempt: %+v, undecided %v", ar.verdict, ar.undecided())
	}
	if p := ar.progress(req); p.QueueErr != qErr.Error() || p.Admitted {
		t.Errorf("progress %+v, want the queue's error", p)
	}
}

// idleWaiter is a place in line that is never rung.
type idleWaiter struct{}

func (idleWaiter) ID() record.RunID            { return "" }
func (idleWaiter) Rung() <-chan struct{}       { return nil }
func (idleWaiter) Changed() <-chan struct{}    { return nil }
func (idleWaiter) Sentinel() bool              { return false }
func (idleWaiter) Remove()                     {}
func (idleWaiter) Release()                    {}
func (idleWaiter) LeaveWith(*record.Run) error { return nil }
func (idleWaiter) HandOver() backend.HandOver  { return backend.HandOver{} }
