package dispatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/runstore"
)

// AdmitRequest asks for a slot for one run of Task.
type AdmitRequest struct {
	Task    string
	Command []string
	Dir     string
	// Pool is a configured pool whose cap the run also needs a slot in.
	Pool string
	// Force admits past the caps and the queue (never past the task's own
	// active run).
	Force bool
	// LockTimeout bounds each wait for the admission lock.
	LockTimeout time.Duration
	// Wait joins the queue instead of refusing, for at most WaitTimeout
	// (zero: no limit).
	Wait        bool
	WaitTimeout time.Duration
	// OnWait, if set, hears about the wait: once when the run joins the
	// queue, after every re-evaluation, and once when it is admitted.
	OnWait func(WaitProgress)
}

// Reservation is an admitted run: its provisioning record is durable and
// this process holds its owner and supervisor locks.
type Reservation struct {
	Rec        *runstore.Record
	Owner      *lockfs.OwnerLock
	Supervisor *lockfs.OwnerLock
	// Warnings are problems admission noticed but stepped around, such as
	// unreadable records in the active set.
	Warnings []string
}

// Admit decides whether the run may take a slot now; with Wait it joins the
// queue and waits for its turn. Every decision is made inside the admission
// critical section: under the admission lock it re-reads the active set and
// the queue, decides, creates and locks the new run's owner locks, and
// makes the provisioning record durable before letting go.
func (d *Dispatcher) Admit(ctx context.Context, req AdmitRequest) (*Reservation, error) {
	if err := runstore.ValidateTask(req.Task); err != nil {
		return nil, &UsageError{Msg: "invalid task name: " + err.Error()}
	}
	if len(req.Command) == 0 {
		return nil, &UsageError{Msg: "missing command: give it after --, as in `crew start TASK -- COMMAND [ARGS...]`"}
	}
	if err := d.Store.Ensure(); err != nil {
		return nil, err
	}
	if !req.Wait {
		res, _, err := d.attempt(ctx, req, nil)
		return res, err
	}
	return d.admitWaiting(ctx, req)
}

// attempt is one pass through the admission critical section. With a
// ticket, it decides for that ticket; without one, for a newcomer who
// lines up behind every live ticket. When the run is not admitted and
// req.Wait is set, a newcomer's ticket is created (in the same critical
// section, so nobody can slip in between) and returned.
func (d *Dispatcher) attempt(ctx context.Context, req AdmitRequest, tk *waitTicket) (*Reservation, *attemptResult, error) {
	st := d.Store
	if !failpoint.Skip("admission-lock") {
		lock, err := lockfs.AcquireAdmission(ctx, st.AdmissionLockPath(), st.AdmissionHolderPath(), req.LockTimeout)
		if err != nil {
			return nil, nil, err
		}
		// Released when attempt returns: after the reservation is durable.
		defer lock.Release()
	}
	failpoint.Hit("admission-locked")

	cfg, _, err := runstore.LoadConfig(st.Layout)
	if err != nil {
		return nil, nil, err
	}
	if req.Pool != "" {
		if _, ok := cfg.Pools[req.Pool]; !ok {
			return nil, nil, unknownPool(req.Pool, cfg)
		}
	}
	view, err := d.scanActive(true, req.Task)
	if err != nil {
		return nil, nil, err
	}
	queue := d.scanQueue(true)
	var myID runstore.RunID
	if tk != nil {
		myID = tk.id
	}
	verdict := decide(cfg, view, queue, myID, req)
	if verdict.admit {
		res, err := d.reserve(req, cfg, view, myID)
		if err != nil {
			return nil, nil, err
		}
		if tk != nil {
			tk.admitted()
		}
		failpoint.Hit("reserved")
		return res, nil, nil
	}
	if view.reaped > 0 {
		// Dead runs' slots were freed: waiters may go (after we let go of
		// the admission lock, which they need).
		defer d.RingWaiters()
	}
	ar := &attemptResult{verdict: verdict, inUse: view.inUse, maximum: cfg.MaximumInProgress,
		poolUse: view.poolUse[req.Pool], poolMax: cfg.Pools[req.Pool], holders: view.holders, warnings: view.warnings}
	if !req.Wait {
		return nil, nil, ar.refusal(req)
	}
	if tk == nil {
		tk, err = d.joinQueue(req, queue)
		if err != nil {
			return nil, nil, err
		}
		ar.verdict.position = len(liveTickets(queue)) + 1
	}
	ar.ticket = tk
	return nil, ar, nil
}

func unknownPool(name string, cfg runstore.Config) error {
	if len(cfg.Pools) == 0 {
		return &UsageError{Msg: fmt.Sprintf("unknown pool %q: no pools are configured (add one with `crew init --pool %s=N`)", name, name)}
	}
	return &UsageError{Msg: fmt.Sprintf("unknown pool %q; configured pools: %s", name, strings.Join(cfg.PoolNames(), ", "))}
}

// reserve creates the run's locks and its durable provisioning record. On
// failure it leaves nothing behind.
func (d *Dispatcher) reserve(req AdmitRequest, cfg runstore.Config, view activeView, id runstore.RunID) (res *Reservation, err error) {
	st := d.Store
	now := d.now()
	var owner *lockfs.OwnerLock
	if id != "" {
		// A queued run keeps the id its ticket had.
		if owner, err = lockfs.CreateOwner(st.OwnerLockPath(id)); err != nil {
			return nil, fmt.Errorf("reserve run %s: %w", id, err)
		}
	}
	for attempt := 0; owner == nil; attempt++ {
		id = runstore.NewRunID(now)
		owner, err = lockfs.CreateOwner(st.OwnerLockPath(id))
		if err != nil && (!errors.Is(err, os.ErrExist) || attempt == 3) {
			return nil, fmt.Errorf("reserve a run of %q: %w", req.Task, err)
		}
	}
	sup, err := lockfs.CreateOwner(st.SupervisorLockPath(id))
	if err != nil {
		_ = owner.RemoveAndRelease()
		return nil, fmt.Errorf("reserve run %s: %w", id, err)
	}
	failpoint.Hit("owner-locked")

	rec := &runstore.Record{
		Version:           runstore.RecordVersion,
		RunID:             id,
		Task:              req.Task,
		State:             runstore.Provisioning,
		Command:           req.Command,
		Dir:               req.Dir,
		Host:              d.Host,
		CreatedAt:         now,
		SupervisorPID:     os.Getpid(),
		Forced:            req.Force && !fits(cfg, view, req.Pool),
		SlotsInUse:        view.inUse,
		MaximumInProgress: cfg.MaximumInProgress,
		Pool:              req.Pool,
	}
	if rec.Forced {
		rec.Reason = fmt.Sprintf("admitted with --force past the cap (%d/%d slots in use", view.inUse, cfg.MaximumInProgress)
		if req.Pool != "" {
			rec.Reason += fmt.Sprintf("; pool %s %d/%d", req.Pool, view.poolUse[req.Pool], cfg.Pools[req.Pool])
		}
		rec.Reason += ")"
	}
	if queuedAt, err := id.CreatedAt(); err == nil && req.Wait {
		rec.QueuedAt = &queuedAt
		rec.AddEvent(queuedAt, "joined the queue")
	}
	switch {
	case rec.Forced:
		rec.AddEvent(now, "%s", rec.Reason)
	case req.Pool != "":
		rec.AddEvent(now, "admitted: %d/%d slots in use, pool %s %d/%d", view.inUse, cfg.MaximumInProgress, req.Pool, view.poolUse[req.Pool], cfg.Pools[req.Pool])
	default:
		rec.AddEvent(now, "admitted: %d/%d slots in use", view.inUse, cfg.MaximumInProgress)
	}
	if err := st.WriteActive(rec); err != nil {
		// The write may have reached the directory before failing (on the
		// directory fsync); a reservation we could not make durable is
		// withdrawn before our locks go.
		_ = os.Remove(st.ActivePath(id))
		_ = sup.RemoveAndRelease()
		_ = owner.RemoveAndRelease()
		return nil, err
	}
	return &Reservation{Rec: rec, Owner: owner, Supervisor: sup, Warnings: view.warnings}, nil
}

// maxReapsPerAdmission bounds the finalizing an admission does for dead
// runs, so that one start after a crash storm does not pay for all of it
// inside the admission lock; the rest hold no slot either way.
const maxReapsPerAdmission = 4

// activeView is what admission derives from the active set: nothing here
// is stored anywhere, so nothing can drift.
type activeView struct {
	reaped   int // dead runs finalized during the scan
	inUse    int
	poolUse  map[string]int
	holders  []ActiveRun
	byTask   map[string]ActiveRun
	warnings []string
}

// fits reports whether one more run of pool fits under the caps.
func fits(cfg runstore.Config, v activeView, pool string) bool {
	if v.inUse >= cfg.MaximumInProgress {
		return false
	}
	return pool == "" || v.poolUse[pool] < cfg.Pools[pool]
}

// scanActive counts the slots held right now. A record holds a slot only
// while its owner lock is held by a living process; with reap (inside the
// admission lock), records whose owners died are finalized on the spot, so
// they stop counting without an operator. An unreadable record fails
// closed while its lock is held.
//
// Past maxReapsPerAdmission, a dead run is still finalized if it is of
// task (the task being admitted), so a task never has two active records.
func (d *Dispatcher) scanActive(reap bool, task string) (activeView, error) {
	v := activeView{byTask: map[string]ActiveRun{}, poolUse: map[string]int{}}
	reaped := 0
	if !reap {
		reaped = maxReapsPerAdmission
	}
	entries, err := d.Store.ListActive()
	if err != nil {
		return v, err
	}
	for _, e := range entries {
		if e.Finished {
			// Finalized; only the active file's removal is pending.
			if held, _ := lockfs.Probe(d.Store.OwnerLockPath(e.ID)); !held && reaped < maxReapsPerAdmission {
				reaped++
				_, _, _ = d.finalizeDead(e.ID)
			}
			continue
		}
		if e.ID == "" {
			v.warnings = append(v.warnings, fmt.Sprintf("%v; move it out of the way", e.Err))
			continue
		}
		held, err := lockfs.Probe(d.Store.OwnerLockPath(e.ID))
		if err != nil {
			// Cannot tell: fail closed.
			held = true
			v.warnings = append(v.warnings, fmt.Sprintf("run %s: %v; counted as holding a slot", e.ID, err))
		}
		switch {
		case e.Err != nil && held:
			v.inUse++
			v.holders = append(v.holders, ActiveRun{RunID: e.ID, Task: "(unreadable record)"})
			v.warnings = append(v.warnings, fmt.Sprintf("%v; its owner is alive, so it is counted as holding a slot", e.Err))
		case e.Err != nil:
			v.warnings = append(v.warnings, fmt.Sprintf("%v; its owner is gone, so it holds no slot; run `crew recover` to quarantine it", e.Err))
		case held && e.Rec.State.Active():
			h := ActiveRun{RunID: e.ID, Task: e.Rec.Task, State: e.Rec.State, Since: e.Rec.CreatedAt, PID: e.Rec.SupervisorPID, Pool: e.Rec.Pool}
			v.inUse++
			if e.Rec.Pool != "" {
				v.poolUse[e.Rec.Pool]++
			}
			v.holders = append(v.holders, h)
			v.byTask[e.Rec.Task] = h
		case held:
			// Terminal record, owner still finishing up: holds no slot.
		case reaped < maxReapsPerAdmission || (reap && e.Rec.Task == task):
			// Dead: holds no slot. Finalize it now, so that a task never
			// has two active records.
			reaped++
			v.reaped++
			if _, _, err := d.finalizeDead(e.ID); err != nil {
				v.warnings = append(v.warnings, fmt.Sprintf("run %s: its owner is gone but it could not be finalized: %v", e.ID, err))
			}
		default:
			// Dead, and left for the next admission or `crew recover`.
		}
	}
	return v, nil
}
