// Package localstore is the state root on this machine as a store of
// package backend: package runstore's records, locks and queue, and
// package recovery's fenced finalization, behind the interfaces the
// orchestration (package dispatch) works through.
package localstore

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/finishindex"
	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/recovery"
	"github.com/crew-dev/crew/internal/retention"
	"github.com/crew-dev/crew/internal/runlog"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// Store is a state root.
type Store struct{ *runstore.Store }

// New returns the store of the state root at path (absolute); it touches
// nothing on disk.
func New(path string) *Store { return &Store{runstore.New(path)} }

// Of is the store of an open state root.
func Of(st *runstore.Store) *Store { return &Store{st} }

func (s *Store) Where() backend.Where { return backend.Where{Name: s.Root(), Kind: "the state root"} }

func (s *Store) Runs() backend.Runs   { return runs{s.Store} }
func (s *Store) Queue() backend.Queue { return s.Store.Queue() }
func (s *Store) History() backend.History {
	return history{s.Store.FinishIndex(), s.Store.Logs(), s.Store}
}
func (s *Store) Logs() backend.Logs { return s.Store.Logs() }

// runs adds recovery's fenced finalization to runstore's records.
type runs struct{ *runstore.Store }

func (r runs) FinalizeDead(id record.RunID, now time.Time) (backend.ReapOutcome, *record.Run, error) {
	return recovery.FinalizeDead(r.Store, id, now)
}

func (r runs) FinalizeStopped(id record.RunID, req *record.StopRequest, now time.Time) (backend.ReapOutcome, *record.Run, error) {
	return recovery.FinalizeStopped(r.Store, id, req, now)
}

// history is the index of finished runs, with runstore's log holds in
// the backend's type.
type history struct {
	*finishindex.Index
	logs *runlog.Logs
	st   *runstore.Store // for recovery's prunes
}

func (h history) HoldLog(id record.RunID) (backend.LogHold, error) {
	l, err := h.logs.HoldLog(id)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Begin opens a start's standing: on a state root there is nothing to
// open, its locks are the kernel's.
func (s *Store) Begin(context.Context) (backend.Starter, error) {
	return starter{s.Store}, nil
}

type starter struct{ *runstore.Store }

func (st starter) LockAdmission(ctx context.Context, timeout time.Duration) (backend.Section, error) {
	a, err := st.Store.LockAdmission(ctx, timeout)
	if err != nil {
		return nil, err
	}
	return Section{a, st.Store}, nil
}

func (starter) Close() {}

// Section is the held admission lock of a state root.
type Section struct {
	*runstore.Admission
	s *runstore.Store
}

func (sec Section) LoadConfig() (record.Config, bool, error)    { return sec.s.LoadConfig() }
func (sec Section) ListTickets() ([]backend.TicketEntry, error) { return sec.s.Queue().ListTickets() }
func (sec Section) ListTicketsUntil(enough backend.Enough) ([]backend.TicketEntry, error) {
	return sec.s.Queue().ListTicketsUntil(enough)
}

func (sec Section) Reserve(rec *record.Run) (backend.Run, error) {
	l, err := sec.Admission.Reserve(rec)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (sec Section) Enqueue(t *record.Ticket) (backend.Waiter, error) {
	w, err := sec.Admission.Enqueue(t)
	if err != nil {
		return nil, err
	}
	return newWaiter(w, sec.s), nil
}

// waiter is a place in a state root's queue: its bell is rung only for
// the waiters admission would let in (dispatch.RingWaiters), and the
// state root's releases (a run or a waiter that died without a word) are
// its changes.
type waiter struct {
	*queue.Waiter
	s        *runstore.Store
	releases *runstore.ReleaseWatch
}

// newWaiter is w watching the state root's releases, in the process that
// waits in it (a background waiter opens its own watch).
func newWaiter(w *queue.Waiter, s *runstore.Store) *waiter {
	releases, _ := s.WatchReleases(w.ID()) // none: the waiter polls
	return &waiter{Waiter: w, s: s, releases: releases}
}

func (w *waiter) Changed() <-chan struct{} {
	if w.releases.Blind() {
		return nil // polls
	}
	return w.releases.C
}

// Sentinel: a run's release (inotify on owners/) is heard only by the head
// of the line, and a waiting start that died only by the waiter just
// behind it; each then rings whoever may go.
func (w *waiter) Sentinel() bool { return w.releases.ForOthers() }

// Remove leaves the queue and stops watching.
func (w *waiter) Remove() {
	w.releases.Close()
	w.Waiter.Remove()
}

// LeaveWith records rec among the finished runs, then leaves the queue:
// whoever finds the ticket gone finds the record.
func (w *waiter) LeaveWith(rec *record.Run) error {
	if err := w.s.RecordNeverAdmitted(rec); err != nil {
		return err
	}
	w.Remove()
	return nil
}

// Release lets go of the place in line without leaving it (a background
// waiter holds it now), and stops watching.
func (w *waiter) Release() {
	w.releases.Close()
	w.Waiter.Release()
}

// HandOver is the state root and the waiter's lock and bell, for a
// background waiter (AdoptWaiter takes them back).
func (w *waiter) HandOver() backend.HandOver {
	return backend.HandOver{Store: []string{"--root", w.s.Root()}, Files: w.Files()}
}

// AdoptWaiter takes over a place in line whose lock and bell a background
// waiter inherited, as its parent handed them on (waiter.HandOver). Its
// standing is a state root's, which needs no session.
func (s *Store) AdoptWaiter(id record.RunID, _ []string, files []*os.File) (backend.Starter, backend.Waiter, error) {
	if len(files) != 2 {
		return nil, nil, fmt.Errorf("waiting start %s: %d descriptors handed over, want its lock and its bell", id, len(files))
	}
	w, err := s.Store.Queue().AdoptWaiter(id, files[0], files[1])
	if err != nil {
		return nil, nil, err
	}
	return starter{s.Store}, newWaiter(w, s.Store), nil
}

// Adopt takes over a run whose locks a detached supervisor inherited, as
// its parent handed them on (runstore.RunLocks.HandOver).
func (s *Store) Adopt(id record.RunID, _ []string, files []*os.File) (backend.Run, error) {
	if len(files) != 2 {
		return nil, fmt.Errorf("run %s: %d descriptors handed over, want its two locks", id, len(files))
	}
	return s.AdoptRunLocks(id, files[0], files[1])
}

// ByFinish reads every finished record (crew prune knows exactly which N
// runs finished last).
func (h history) ByFinish() ([]retention.Run, []string, error) {
	return recovery.ByFinish(h.st)
}

func (h history) Remove(id record.RunID, dry bool) (int64, error) {
	return recovery.RemoveFinished(h.st, id, dry)
}

func (h history) AfterPrune(removed []record.RunID) { recovery.AfterPrune(h.st, removed) }

// PruneLazily reads the oldest shards of the done index (recovery.LazyPrune).
func (h history) PruneLazily(p retention.Policy, now time.Time) error {
	_, err := recovery.LazyPrune(h.st, p, now, recovery.DefaultLazyLimits)
	return err
}

// Prepare makes a layout directory a copied root lost (owners/): without
// it, runs cannot be fenced, and so neither finalized nor quarantined.
func (s *Store) Prepare(dry bool) (bool, error) {
	if !s.Exists() {
		return false, nil // nothing was ever run here
	}
	if dry {
		return true, nil
	}
	return true, s.Ensure()
}

func (s *Store) Quarantine(e backend.ActiveEntry, now time.Time, host string) (backend.ReapOutcome, string, error) {
	return recovery.Quarantine(s.Store, e, now, host)
}

func (s *Store) Sweep(o backend.UpkeepOptions) []vocab.RecoverItem { return recovery.Sweep(s.Store, o) }
func (s *Store) Reindex(o backend.UpkeepOptions) []vocab.RecoverItem {
	return recovery.Reindex(s.Store, o)
}

// What a state root is, to the orchestration.
var (
	_ backend.Store       = (*Store)(nil)
	_ backend.Adopter     = (*Store)(nil)
	_ backend.Upkeep      = (*Store)(nil)
	_ backend.Processes   = (*Store)(nil)
	_ backend.Sizes       = (*Store)(nil)
	_ backend.Refusals    = (*Store)(nil)
	_ backend.DeadWaiters = (*Store)(nil)
)
