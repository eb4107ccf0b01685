package dispatch

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/crew-dev/crew/internal/backend"
)

// Backoff between two tries of a decision that lost to a concurrent
// change: the first try again at once (the store has just been changed, so
// a fresh read will likely commit), then a random wait up to a bound that
// doubles from conflictBackoff to maxConflictBackoff, so that starts that
// collided do not collide again in step.
const (
	conflictBackoff    = 4 * time.Millisecond
	maxConflictBackoff = 256 * time.Millisecond
)

// untilCommitted runs try (one pass through the admission critical
// section, given how long it may wait to enter it) until it returns
// anything but a conflict (backend.ErrConflict: another start changed what
// the pass read before it could commit, and nothing was written), or
// timeout runs out: then the error says how many tries lost, and to whom
// the last. A store whose sections hold a lock never conflicts: try runs
// once, with the whole timeout.
func untilCommitted[T any](ctx context.Context, timeout time.Duration, try func(left time.Duration) (T, error)) (T, error) {
	deadline := time.Now().Add(timeout)
	left := timeout
	var last *backend.ConflictError
	for tries := 1; ; tries++ {
		got, err := try(left)
		var c *backend.ConflictError
		if !errors.As(err, &c) {
			if err != nil && last != nil && !time.Now().Before(deadline) {
				// The time ran out inside a try (its read of the store
				// cut short), after others had won: say that, not
				// what the cut read says (a store that did not answer).
				var zero T
				return zero, last.TimedOut(timeout, tries-1)
			}
			return got, err
		}
		last = c
		if !backOff(ctx, deadline, tries) {
			var zero T
			return zero, c.TimedOut(timeout, tries)
		}
		if left = time.Until(deadline); left <= 0 {
			var zero T
			return zero, c.TimedOut(timeout, tries)
		}
	}
}

// backOff waits before the next try after the tries-th conflict; false if
// ctx ends or the deadline passes first.
func backOff(ctx context.Context, deadline time.Time, tries int) bool {
	if tries > 1 {
		bound := min(conflictBackoff<<min(tries-2, 10), maxConflictBackoff)
		wait := rand.N(bound) + 1
		if time.Until(deadline) <= wait {
			return false
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return ctx.Err() == nil && time.Now().Before(deadline)
}
