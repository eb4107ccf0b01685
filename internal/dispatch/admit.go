package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// Reservation is an admitted run: its provisioning record is durable and
// this process holds it (Run), under its start's standing (Starter, which
// the caller closes once the run is handed on or over).
type Reservation struct {
	Rec     *record.Run
	Run     backend.Run
	Starter backend.Starter
	// Warnings are problems admission noticed but stepped around, such as
	// unreadable records in the active set.
	Warnings []error
}

// Admit decides whether the run may take a slot now; with Wait it joins the
// queue and waits for its turn. Every decision is made inside the admission
// critical section: under the admission lock it re-reads the active set and
// the queue, decides, and makes the reservation durable before letting go.
func (d *Dispatcher) Admit(ctx context.Context, req vocab.AdmitRequest) (*Reservation, error) {
	res, _, err := admit(ctx, d, req, false)
	return res, err
}

// admit is Admit. With handOff (and req.Wait), a start that is not
// admitted at once returns as soon as it is in line: its place, and its
// standing with the store, are kept (queued) for a background waiter to
// take over.
func admit(ctx context.Context, d *Dispatcher, req vocab.AdmitRequest, handOff bool) (*Reservation, *queued, error) {
	if err := record.ValidateNewTask(req.Task); err != nil {
		return nil, nil, vocab.Usagef("invalid task name: %w", err)
	}
	if len(req.Command) == 0 {
		return nil, nil, vocab.Usagef("missing command: give it after --, as in `crew start TASK -- COMMAND [ARGS...]`")
	}
	bctx, cancel := context.WithTimeout(ctx, req.LockTimeout) // a store that cannot be reached says so in time
	st, err := d.Store.Begin(bctx)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	a := &admitter{d: d, st: st, req: req, handOff: handOff}
	var res *Reservation
	if req.Wait {
		res, err = a.admitWaiting(ctx, nil)
	} else {
		res, _, err = a.attempt(ctx, nil)
	}
	switch {
	case a.queued != nil:
		a.queued.st = st
		return nil, a.queued, nil
	case res == nil:
		st.Close()
		return nil, nil, err
	}
	res.Starter = st
	return res, nil, err
}

// admitter is one crew start's way through admission: its standing with
// the store, and what it asks for.
type admitter struct {
	d   *Dispatcher
	st  backend.Starter
	req vocab.AdmitRequest
	// handOff: return as soon as the start is in line (queued), for a
	// background waiter to wait in its place.
	handOff bool
	queued  *queued
	// keep: the start is a background waiter, which leaves the queue
	// itself, saying why (a record of the start that never ran), rather
	// than have admitWaiting remove its ticket; waited is how long it had
	// waited when it took over, which its --wait=D counts too.
	keep   bool
	waited time.Duration
}

// attempt is one decision: a pass through the admission critical section,
// again for as long as the store says another start changed what it read
// before it could commit (backend.ErrConflict; etcd's admission takes no
// lock), within --lock-timeout.
func (a *admitter) attempt(ctx context.Context, w backend.Waiter) (*Reservation, *attemptResult, error) {
	type decided struct {
		res *Reservation
		ar  *attemptResult
	}
	got, err := untilCommitted(ctx, a.req.LockTimeout, func(left time.Duration) (decided, error) {
		res, ar, err := a.pass(ctx, w, left)
		return decided{res, ar}, err
	})
	return got.res, got.ar, err
}

// pass is one pass through the admission critical section, which it
// waits up to timeout to enter. With a waiter, it decides for that
// waiter's ticket; without one, for a newcomer who lines up behind every
// waiting start. When the run is not admitted and req.Wait is set, a
// newcomer's ticket is created (in the same critical section, so nobody
// can slip in between) and returned.
func (a *admitter) pass(ctx context.Context, w backend.Waiter, timeout time.Duration) (*Reservation, *attemptResult, error) {
	d, st, req := a.d, a.st, a.req
	adm, err := st.LockAdmission(ctx, timeout)
	if err != nil {
		return nil, nil, err
	}
	// Released when attempt returns: after the reservation is durable.
	defer adm.Release()
	failpoint.Hit(failpoint.AdmissionLocked)

	cfg, _, err := adm.LoadConfig()
	if err != nil {
		return a.unconfigured(adm, w, err)
	}
	if req.Pool != "" {
		if _, ok := cfg.Pools[req.Pool]; !ok {
			return nil, nil, unknownPool(req.Pool, cfg)
		}
	}
	set, err := d.readActive(true, adm)
	if err != nil {
		return nil, nil, err
	}
	line, qWarnings, err := a.queueFor(adm, w)
	if err != nil {
		return a.unreadableQueue(w, err)
	}
	queue := line.tickets
	reaped := a.reap(set, req.Task)
	usage := set.usage()
	cand := admission.Candidate{Task: req.Task, Pool: req.Pool, Force: req.Force}
	if w != nil {
		cand.Ticket = w.ID()
	}
	verdict := admission.Decide(cfg, usage, queue, cand)
	d.exactHolder(set, verdict.BlockingRun)
	warnings := append(append(set.warnings(), reaped.warnings...), qWarnings...)
	if verdict.Admit {
		res, err := a.reserve(adm, cfg, usage, verdict, w)
		if err != nil {
			return nil, nil, err
		}
		res.Warnings = warnings
		failpoint.Hit(failpoint.Reserved)
		return res, nil, nil
	}
	if reaped.n > 0 {
		// Dead runs' slots were freed: waiters may go (after we let go of
		// the admission lock, which they need).
		defer d.RingWaiters()
	}
	if err := a.nestedDeadlock(set, cfg, usage, cand); err != nil {
		return nil, nil, err // a waiter's ticket goes as admitWaiting returns
	}
	ar := &attemptResult{verdict: verdict, cfg: cfg, usage: usage, pool: req.Pool, warnings: warnings, waiter: w}
	if !req.Wait {
		return nil, nil, ar.refusal(req)
	}
	if w == nil {
		if ar.waiter, err = a.joinQueue(adm, queue); err != nil {
			return nil, nil, err
		}
	}
	return nil, ar, nil
}

// queueFor reads the queue for an attempt, with the warnings its
// unreadable tickets call for. A queue that cannot be listed is an error,
// except for a newcomer with --force, which skips the line anyway.
func (a *admitter) queueFor(adm backend.Section, w backend.Waiter) (line, []error, error) {
	d, req := a.d, a.req
	l, err := liveQueueUntil(d, adm, upToOwn(w))
	var qe *vocab.QueueError
	if errors.As(err, &qe) && req.Force && w == nil {
		return line{}, []error{fmt.Errorf("cannot read the queue of waiting starts (%w): --force skipped it", qe.Err)}, nil
	}
	return l, l.warnings(), err
}

// UnknownPool is the usage error for a start with a pool cfg does not
// configure.
func UnknownPool(name string, cfg record.Config) error { return unknownPool(name, cfg) }

func unknownPool(name string, cfg record.Config) error {
	if len(cfg.Pools) == 0 {
		return vocab.Usagef("unknown pool %q: no pools are configured (add one with `crew init --pool %s=N`)", name, name)
	}
	return vocab.Usagef("unknown pool %q; configured pools: %s", name, strings.Join(cfg.PoolNames(), ", "))
}

// maxReapsPerAdmission bounds the finalizing an admission does for dead
// runs, so that one start after a crash storm does not pay for all of it
// inside the admission lock; the rest hold no slot either way.
const maxReapsPerAdmission = 4

type reapResult struct {
	n        int
	warnings []error
}

// reap finalizes runs whose owners are gone, so they stop cluttering the
// active set without an operator: at most maxReapsPerAdmission, plus every
// dead run of task (the task being admitted), so that a task never has two
// active records.
func (a *admitter) reap(set *activeSet, task string) reapResult {
	d := a.d
	var r reapResult
	for _, e := range set.dead() {
		if r.n >= maxReapsPerAdmission && (e.Rec == nil || e.Rec.Task != task) {
			continue
		}
		r.n++
		if _, _, err := d.runs().FinalizeDead(e.ID, d.now()); err != nil {
			r.warnings = append(r.warnings, fmt.Errorf("run %s: its owner is gone but it could not be finalized: %w", e.ID, err))
		}
	}
	return r
}

// reserve creates the run's locks and its durable provisioning record. On
// failure it leaves nothing behind. A queued run keeps its ticket's id.
func (a *admitter) reserve(adm backend.Section, cfg record.Config, u admission.Usage, v admission.Verdict, w backend.Waiter) (*Reservation, error) {
	d, req := a.d, a.req
	now := d.now()
	for attempt := 0; ; attempt++ {
		id := record.NewRunID(now)
		if w != nil {
			id = w.ID()
		}
		rec := a.provisioning(id, cfg, u, v, now)
		run, err := adm.Reserve(rec)
		if err == nil {
			if w != nil {
				w.Remove() // its run record carries on under the same id
			}
			return &Reservation{Rec: rec, Run: run}, nil
		}
		if w != nil || !errors.Is(err, fs.ErrExist) || attempt == 3 {
			return nil, fmt.Errorf("reserve a run of %q: %w", req.Task, err)
		}
	}
}

// provisioning is the reservation's record: what was admitted, and what
// admission saw.
func (a *admitter) provisioning(id record.RunID, cfg record.Config, u admission.Usage, v admission.Verdict, now time.Time) *record.Run {
	d, req := a.d, a.req
	rec := &record.Run{
		Version:           record.RecordVersion,
		RunID:             id,
		Task:              req.Task,
		State:             record.Provisioning,
		Command:           req.Command,
		Dir:               req.Dir,
		Host:              d.Host,
		CreatedAt:         now,
		SupervisorPID:     os.Getpid(),
		Forced:            v.Forced,
		SlotsInUse:        u.InUse,
		MaximumInProgress: cfg.MaximumInProgress,
		Pool:              req.Pool,
		LogMax:            logMaxFor(req, cfg),
		Timeout:           record.Duration(req.Timeout),
		Retries:           req.Retries,
		Parent:            req.Parent,
		Labels:            req.Labels,
	}
	if req.Retries > 0 {
		rec.RetryDelay = record.Duration(req.RetryDelay)
	}
	if queuedAt, err := id.CreatedAt(); err == nil && req.Wait {
		rec.QueuedAt = &queuedAt
		rec.AddEvent(queuedAt, "joined the queue")
	}
	pool := ""
	if req.Pool != "" {
		pool = fmt.Sprintf(", pool %s %d/%d", req.Pool, u.PoolUse[req.Pool], cfg.Pools[req.Pool])
	}
	if rec.Forced {
		rec.Reason = fmt.Sprintf("admitted with --force past the cap (%d/%d slots in use%s)",
			u.InUse, cfg.MaximumInProgress, strings.Replace(pool, ", pool", "; pool", 1))
		rec.AddEvent(now, "%s", rec.Reason)
	} else {
		rec.AddEvent(now, "admitted: %d/%d slots in use%s", u.InUse, cfg.MaximumInProgress, pool)
	}
	return rec
}
