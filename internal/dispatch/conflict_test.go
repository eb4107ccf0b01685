package dispatch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/vocab"
)

// A start that lost to others and then ran out of time inside its next
// try (its read of the store cut short by the deadline) says it timed out
// losing, not what the cut read says: that the store did not answer.
func TestTimeRunningOutInsideATryAfterConflictsIsATimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	deadline := time.Now().Add(timeout)
	tries := 0
	_, err := untilCommitted(context.Background(), timeout, func(time.Duration) (int, error) {
		tries++
		if tries == 1 {
			return 0, &backend.ConflictError{Path: "etcd://x/p", Change: "run r-1 was reserved"}
		}
		<-time.After(time.Until(deadline)) // the read that the deadline cuts
		return 0, errors.New("read the active set: no answer within 5s")
	})
	var lt *vocab.LockTimeoutError
	if !errors.As(err, &lt) {
		t.Fatalf("untilCommitted = %v, want a *vocab.LockTimeoutError", err)
	}
	if lt.Lost != 1 || lt.Change != "run r-1 was reserved" {
		t.Errorf("timeout says %d lost, last %q; want 1, the conflict's change", lt.Lost, lt.Change)
	}
}

// An error of the first try, with nothing lost before it, is that error.
func TestAnErrorWithoutConflictsIsItself(t *testing.T) {
	want := errors.New("refused")
	_, err := untilCommitted(context.Background(), time.Second, func(time.Duration) (int, error) { return 0, want })
	if err != want {
		t.Errorf("untilCommitted = %v, want %v", err, want)
	}
}
