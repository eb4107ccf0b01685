package dispatch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// Who may stop what. A state root shared with a group lets each member
// write every file in it, so a stop request's content cannot say who may
// stop a run; the kernel can: a run belongs to the user whose supervisor
// holds it, as the owner of its owner lock file shows (runstore.RunUser),
// and only that user and root may stop it (record.MayStop), just as only
// they may signal its processes. crew stop checks here, before it writes
// or signals anything, so that the refusal comes at once and names whose
// run it is; the run's supervisor checks again (supervise/rights.go),
// since a request file can be written by hand, and so does a waiting start
// (stopRequestFor).

// mayStopRun refuses a stop of rec by a user who may not stop it.
func (d *Dispatcher) mayStopRun(rec *record.Run) error {
	me := os.Geteuid()
	if me == 0 {
		return nil
	}
	procs, ok := d.procs()
	if !ok {
		return nil // a store shared with other hosts knows no users: its runs are the fleet's
	}
	owner, err := procs.RunUser(rec.RunID, rec.Locks)
	if err != nil {
		return &vocab.StopError{Err: fmt.Errorf("%w; only its own user or root may stop it, so crew stop signalled nothing", err)}
	}
	return notYours(fmt.Sprintf("run %s", rec.RunID), owner, me, "stop it", "nothing was signalled")
}

// mayStopWaiter refuses to take the waiting start of ticket id out of the
// queue for a user who may not stop it. gone reports that its waiter left
// the queue meanwhile (admitted, or gone), so that there is no waiting
// start left to ask about.
func (d *Dispatcher) mayStopWaiter(id record.RunID) (gone bool, err error) {
	me := os.Geteuid()
	if me == 0 {
		return false, nil
	}
	procs, ok := d.procs()
	if !ok {
		return false, nil
	}
	owner, err := procs.WaiterUser(id)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, &vocab.StopError{Err: fmt.Errorf("%w; only its own user or root may take it out of the queue, so crew stop changed nothing", err)}
	}
	return false, notYours(fmt.Sprintf("the waiting start %s", id), owner, me, "take it out of the queue", "nothing was changed")
}

// notYours is the refusal of action on what, which belongs to user owner,
// by user me; nil if me may.
func notYours(what string, owner, me int, action, undone string) error {
	if record.MayStop(me, owner) {
		return nil
	}
	return &vocab.NotPermittedError{Err: fmt.Errorf("%s belongs to %s: only its own user or root may %s, and crew stop runs as %s; %s",
		what, runstore.UserName(owner), action, runstore.UserName(me), undone)}
}

// stopRequestFor is the stop request for waiter w if one was written by
// the waiter's own user or by root, else nil: a waiting start leaves the
// queue only for them.
func (a *admitter) stopRequestFor(w backend.Waiter) *record.StopRequest {
	d := a.d
	req := d.runs().ReadStopRequest(w.ID())
	if req == nil {
		return nil
	}
	if _, ok := req.Requester(os.Geteuid()); !ok {
		return nil
	}
	return req
}
