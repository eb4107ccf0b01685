package backend

import (
	"errors"
	"fmt"
	"time"

	"github.com/crew-dev/crew/internal/vocab"
)

// ErrConflict is a write of a Section that was not made because what the
// section read has changed since (another start reserved a run or joined
// the queue, the config was written): the decision it would have
// committed may be wrong now. Nothing was written; read and decide again.
// A store whose sections hold a lock (a state root) never returns it.
var ErrConflict = errors.New("the store changed since admission read it")

// ConflictError is ErrConflict with what changed, and who changed it,
// where the store can tell: what a start that keeps losing says when its
// --lock-timeout runs out.
type ConflictError struct {
	// Path is the store (an etcd store's URL).
	Path string
	// Change says what changed ("run 01H... was reserved").
	Change string
	// By is the process that changed it, where known.
	By vocab.Holder
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s: %s (by %s) since admission read it: nothing was written", e.Path, e.Change, e.By)
}

func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// TimedOut is the error of a start that kept losing to concurrent changes
// for waited, over tries tries, the last one lost to e.
func (e *ConflictError) TimedOut(waited time.Duration, tries int) error {
	return &vocab.LockTimeoutError{Path: e.Path, Waited: waited, Holder: e.By, Lease: true, Lost: tries, Change: e.Change}
}
