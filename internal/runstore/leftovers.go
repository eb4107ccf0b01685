package runstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runlog"
	"github.com/crew-dev/crew/internal/stateroot"
)

// LeftoverKind is a kind of file a crash leaves behind outside any record.
type LeftoverKind int

const (
	// LeftoverLock: a run's lock file with no record in the active set
	// (a crash before the record was written, or after it was finalized).
	LeftoverLock LeftoverKind = iota + 1
	// LeftoverTemp: a temporary file of an interrupted atomic write.
	LeftoverTemp
	// LeftoverTicket: the ticket of a waiting start that died.
	LeftoverTicket
	// LeftoverQueueLock: a waiter's lock (and bell) with no ticket.
	LeftoverQueueLock
	// LeftoverLog: a log whose run has no record anywhere (a prune cut
	// short by an older crew), or the pieces of a capped log's tail.
	LeftoverLog
	// LeftoverStop: a stop request for a run that is neither active nor
	// waiting (crew stop wrote it as the run ended), which nobody will
	// ever read.
	LeftoverStop
)

// Leftover is one such file.
type Leftover struct {
	Kind LeftoverKind
	ID   record.RunID // the run or ticket it belongs to, if any
	Task string       // for tickets
	Path string       // full path, for the report
	dir  string
	name string
}

// Leftovers lists what crashes left behind, as far as can be told without
// taking anything: files whose locks are held are not listed. Only
// RemoveLeftover, under the admission lock, decides for good.
func (s sweep) Leftovers() ([]Leftover, error) {
	if !s.Exists() {
		return nil, nil
	}
	var out []Leftover
	out = append(out, s.lockLeftovers()...)
	tickets, err := s.ticketLeftovers()
	if err != nil {
		return out, err
	}
	out = append(out, tickets...)
	out = append(out, s.logLeftovers()...)
	out = append(out, s.stopLeftovers()...)
	dirs := []string{".", locksDir, runsDir, activeDir, quarantineDir, queueDir, ownersDir}
	shards, _ := s.index.Shards()
	for _, sh := range shards {
		dirs = append(dirs, doneDir+"/"+sh)
	}
	for _, d := range dirs {
		out = append(out, s.tempLeftovers(d)...)
	}
	return out, nil
}

func (s sweep) names(rel string) []string {
	dir, done, err := s.dirOrRoot(rel)
	if err != nil {
		return nil
	}
	defer done()
	names, _ := listNames(dir)
	return names
}

// lockLeftovers lists the lock files of owners/ whose run has no record
// in the active set, and those a finisher moved into owners/.released
// but did not get to remove (a crash between the move and the unlink).
func (s sweep) lockLeftovers() []Leftover {
	return append(s.lockLeftoversIn(ownersDir), s.lockLeftoversIn(ownersDir+"/"+releasedDir)...)
}

func (s sweep) lockLeftoversIn(rel string) []Leftover {
	var out []Leftover
	for _, name := range s.names(rel) {
		base, ok := strings.CutSuffix(name, ".lock")
		if !ok {
			continue
		}
		base = strings.TrimSuffix(base, ".supervisor")
		if !record.LooksLikeRunID(base) {
			continue
		}
		id := record.RunID(base)
		if s.hasActiveFile(id) {
			continue // handled with its run
		}
		if s.lockHeld(rel, name) {
			continue // a supervisor finishing up
		}
		out = append(out, Leftover{Kind: LeftoverLock, ID: id, Path: s.display(rel, name), dir: rel, name: name})
	}
	return out
}

// stopLeftovers lists the stop requests of runs that are neither in the
// active set nor waiting in line: a finished run's supervisor removes its
// request, but a crew stop that read the run as active just before it
// ended writes one after that.
func (s sweep) stopLeftovers() []Leftover {
	var out []Leftover
	for _, name := range s.names(ownersDir) {
		base, ok := strings.CutSuffix(name, ".stop")
		if !ok || !record.LooksLikeRunID(base) {
			continue
		}
		id := record.RunID(base)
		if s.hasActiveFile(id) || s.queue.HasTicket(id) {
			continue
		}
		out = append(out, Leftover{Kind: LeftoverStop, ID: id, Path: s.display(ownersDir, name), dir: ownersDir, name: name})
	}
	return out
}

func (s sweep) ticketLeftovers() ([]Leftover, error) {
	entries, err := s.queue.ListTickets()
	if err != nil {
		return nil, err
	}
	var out []Leftover
	for _, e := range entries {
		if e.Waiter.MayLive() {
			continue
		}
		l := Leftover{Kind: LeftoverTicket, ID: e.ID, Path: s.display(queueDir, queue.TicketName(e.ID)), dir: queueDir, name: queue.TicketName(e.ID)}
		if e.Ticket != nil {
			l.Task = e.Ticket.Task
		}
		out = append(out, l)
	}
	// Locks and bells whose ticket is gone (a waiter killed while joining
	// or leaving the queue).
	for _, name := range s.names(queueDir) {
		base, ok := strings.CutSuffix(name, ".lock")
		if !ok || !record.LooksLikeRunID(base) {
			continue
		}
		id := record.RunID(base)
		if s.queue.HasTicket(id) || s.lockHeld(queueDir, name) {
			continue
		}
		out = append(out, Leftover{Kind: LeftoverQueueLock, ID: id, Path: s.display(queueDir, name), dir: queueDir, name: name})
	}
	return out, nil
}

func (s sweep) logLeftovers() []Leftover {
	var out []Leftover
	for _, name := range s.names(logsDir) {
		id, _, ok := runlog.RunOf(name)
		if !ok {
			continue
		}
		if s.hasActiveFile(id) || s.IsDone(id) || s.queue.HasTicket(id) {
			continue
		}
		out = append(out, Leftover{Kind: LeftoverLog, ID: id, Path: s.display(logsDir, name), dir: logsDir, name: name})
	}
	return out
}

func (s sweep) tempLeftovers(rel string) []Leftover {
	dir, done, err := s.dirOrRoot(rel)
	if err != nil {
		return nil
	}
	defer done()
	var out []Leftover
	for _, name := range s.names(rel) {
		if !stateroot.IsTempName(name) || name == locksDir {
			continue
		}
		if fi, err := dir.Lstat(name); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		l := Leftover{Kind: LeftoverTemp, Path: s.display(rel, name), dir: rel, name: name}
		if id, ok := idFromTempName(name); ok {
			if s.lockHeld(ownersDir, ownerLockName(id)) {
				continue // its run is being written right now
			}
			l.ID = id
		}
		out = append(out, l)
	}
	return out
}

func (s sweep) lockHeld(rel, name string) bool {
	dir, err := s.dir(rel)
	if err != nil {
		return false
	}
	defer dir.Close()
	l, err := probe(dir, name)
	return err != nil || l == record.Alive
}

// idFromTempName extracts the run id from a temporary file name such as
// ".r-...-0123456789abcdef.json3f2a...", if it has one.
func idFromTempName(name string) (record.RunID, bool) {
	base := strings.TrimPrefix(name, ".")
	if len(base) >= record.RunIDLen && record.LooksLikeRunID(base[:record.RunIDLen]) {
		return record.RunID(base[:record.RunIDLen]), true
	}
	return "", false
}

// RemoveLeftover removes a leftover if it still is one, and reports
// whether it did. It runs under the admission lock (so no reservation or
// ticket is half-made while it looks) and takes the lock that guards each
// file before removing it.
func (a *Admission) RemoveLeftover(l Leftover) (bool, error) {
	s := a.s
	dir, done, err := s.dirOrRoot(l.dir)
	if err != nil {
		return false, err
	}
	defer done()
	switch l.Kind {
	case LeftoverLock:
		lk, err := lockfs.Take(dir, l.name)
		if err != nil {
			return false, nil // held (a supervisor finishing up) or already gone
		}
		if s.hasActiveFile(l.ID) {
			_ = lk.Release()
			return false, nil
		}
		return true, lk.RemoveAndRelease()
	case LeftoverTicket:
		return s.queue.RemoveDeadTicket(l.ID), nil
	case LeftoverQueueLock:
		lk, err := lockfs.Take(dir, l.name)
		if err != nil {
			return false, nil
		}
		if s.queue.HasTicket(l.ID) {
			_ = lk.Release()
			return false, nil
		}
		_ = removeFile(dir, queue.BellName(l.ID))
		return true, lk.RemoveAndRelease()
	case LeftoverStop:
		// Under the admission lock no ticket becomes a run unseen; a run
		// reserved since the listing has its record in the active set.
		if s.hasActiveFile(l.ID) || s.queue.HasTicket(l.ID) {
			return false, nil
		}
		return true, removeFile(dir, l.name)
	case LeftoverLog:
		if s.hasActiveFile(l.ID) || s.IsDone(l.ID) || s.queue.HasTicket(l.ID) {
			return false, nil
		}
		if _, tail, _ := runlog.RunOf(l.name); tail {
			return true, s.logs.RemoveTail(l.ID)
		}
		return true, removeFile(dir, l.name)
	case LeftoverTemp:
		if l.ID != "" {
			owners, err := s.layout(ownersDir)
			if err == nil {
				lk, err := lockfs.Take(owners, ownerLockName(l.ID))
				if errors.Is(err, lockfs.ErrBusy) {
					return false, nil
				}
				if err == nil {
					defer lk.Release()
				}
			}
		}
		return true, removeFile(dir, l.name)
	}
	return false, fmt.Errorf("unknown leftover kind %d", l.Kind)
}
