package dispatch

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	// Force admits past the cap (never past the task's own active run).
	Force bool
	// LockTimeout bounds the wait for the admission lock.
	LockTimeout time.Duration
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

// Admit runs the admission critical section: under the admission lock it
// re-reads the active set, decides, creates and locks the new run's owner
// locks, and makes the provisioning record durable before letting go.
func (d *Dispatcher) Admit(ctx context.Context, req AdmitRequest) (*Reservation, error) {
	if err := runstore.ValidateTask(req.Task); err != nil {
		return nil, &UsageError{Msg: "invalid task name: " + err.Error()}
	}
	if len(req.Command) == 0 {
		return nil, &UsageError{Msg: "missing command: give it after --, as in `crew start TASK -- COMMAND [ARGS...]`"}
	}
	st := d.Store
	if err := st.Ensure(); err != nil {
		return nil, err
	}
	if !failpoint.Skip("admission-lock") {
		lock, err := lockfs.AcquireAdmission(ctx, st.AdmissionLockPath(), st.AdmissionHolderPath(), req.LockTimeout)
		if err != nil {
			return nil, err
		}
		// Released when Admit returns: after the reservation is durable.
		defer lock.Release()
	}
	failpoint.Hit("admission-locked")

	cfg, _, err := runstore.LoadConfig(st.Layout)
	if err != nil {
		return nil, err
	}
	view, err := d.scanActive()
	if err != nil {
		return nil, err
	}
	if h, busy := view.byTask[req.Task]; busy {
		return nil, &RefusedError{Kind: TaskActive, Task: req.Task, InUse: view.inUse, Maximum: cfg.MaximumInProgress, Holders: []ActiveRun{h}, Warnings: view.warnings}
	}
	if view.inUse >= cfg.MaximumInProgress && !req.Force {
		return nil, &RefusedError{Kind: SlotsBusy, Task: req.Task, InUse: view.inUse, Maximum: cfg.MaximumInProgress, Holders: view.holders, Warnings: view.warnings}
	}

	res, err := d.reserve(req, cfg, view)
	if err != nil {
		return nil, err
	}
	failpoint.Hit("reserved")
	return res, nil
}

// reserve creates the run's locks and its durable provisioning record. On
// failure it leaves nothing behind.
func (d *Dispatcher) reserve(req AdmitRequest, cfg runstore.Config, view activeView) (res *Reservation, err error) {
	st := d.Store
	now := d.now()
	var id runstore.RunID
	var owner *lockfs.OwnerLock
	for attempt := 0; ; attempt++ {
		id = runstore.NewRunID(now)
		owner, err = lockfs.CreateOwner(st.OwnerLockPath(id))
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || attempt == 3 {
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
		Forced:            req.Force && view.inUse >= cfg.MaximumInProgress,
		SlotsInUse:        view.inUse,
		MaximumInProgress: cfg.MaximumInProgress,
	}
	if rec.Forced {
		rec.Reason = fmt.Sprintf("admitted with --force past the cap (%d/%d slots in use)", view.inUse, cfg.MaximumInProgress)
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
	inUse    int
	holders  []ActiveRun
	byTask   map[string]ActiveRun
	warnings []string
}

// scanActive counts the slots held right now. A record holds a slot only
// while its owner lock is held by a living process; records whose owners
// died are finalized on the spot, so they stop counting without an
// operator. An unreadable record fails closed while its lock is held.
func (d *Dispatcher) scanActive() (activeView, error) {
	v := activeView{byTask: map[string]ActiveRun{}}
	reaped := 0
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
			h := ActiveRun{RunID: e.ID, Task: e.Rec.Task, State: e.Rec.State, Since: e.Rec.CreatedAt, PID: e.Rec.SupervisorPID}
			v.inUse++
			v.holders = append(v.holders, h)
			v.byTask[e.Rec.Task] = h
		case held:
			// Terminal record, owner still finishing up: holds no slot.
		case reaped < maxReapsPerAdmission:
			// Dead: holds no slot. Finalize it now, so that a task never
			// has two active records.
			reaped++
			if _, _, err := d.finalizeDead(e.ID); err != nil {
				v.warnings = append(v.warnings, fmt.Sprintf("run %s: its owner is gone but it could not be finalized: %v", e.ID, err))
			}
		default:
			// Dead, and left for the next admission or `crew recover`.
		}
	}
	return v, nil
}
