//go:build linux

package proc

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// FindHolders scans every process for a descriptor that holds an exclusive
// flock on one of files. crew's own process is never listed. A process
// whose descriptors cannot be read is counted as unreadable, never guessed
// about.
func FindHolders(files ...FileID) (Scan, error) {
	want := make(map[FileID]bool, len(files))
	for _, f := range files {
		want[f] = true
	}
	pids, err := listPIDs()
	if err != nil {
		return Scan{}, err
	}
	var scan Scan
	self := os.Getpid()
	for _, pid := range pids {
		if pid == self {
			continue
		}
		held, err := heldFiles(pid, want)
		if errors.Is(err, errUnreadable) {
			scan.Unreadable++
		}
		for _, f := range held {
			st, err := readStat(pid)
			if err != nil {
				continue // exited meanwhile
			}
			scan.Holders = append(scan.Holders, Holder{PID: pid, File: f, PGID: st.pgrp, Start: st.start, State: st.state})
		}
	}
	return scan, nil
}

// Proc is a holder pinned by a pidfd: whatever becomes of its pid, the
// pidfd reaches this process or nobody.
type Proc struct {
	pid   int
	fd    int
	start uint64
	file  FileID
}

// Pin opens a pidfd on h's process and proves, through it, that the
// process with that pid is still the one that holds h's file. ErrGone if
// it exited or let go of the lock.
func Pin(h Holder) (*Proc, error) {
	fd, err := unix.PidfdOpen(h.PID, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return nil, ErrGone
	case errors.Is(err, unix.ENOSYS):
		return nil, fmt.Errorf("pidfd_open(%d): this kernel has no pidfds (Linux 5.3 or later has): %w", h.PID, ErrUnsupported)
	case err != nil:
		return nil, fmt.Errorf("pidfd_open(%d): %w", h.PID, err)
	}
	p := &Proc{pid: h.PID, fd: fd, start: h.Start, file: h.File}
	if _, err := p.verify(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// PID is the pinned process's pid.
func (p *Proc) PID() int { return p.pid }

// verify proves that the pinned process still runs, still holds the lock,
// and is the process the pid names now, and returns its process group.
// Every read goes by pid; the pidfd check last shows the process was not
// reaped meanwhile, so the pid could not have passed to anyone else.
func (p *Proc) verify() (pgid int, err error) {
	st, err := readStat(p.pid)
	if err != nil || st.start != p.start || st.state == 'Z' || st.state == 'X' {
		return 0, ErrGone
	}
	held, err := heldFiles(p.pid, map[FileID]bool{p.file: true})
	if err != nil || len(held) == 0 {
		return 0, ErrGone
	}
	if !p.unreaped() {
		return 0, ErrGone
	}
	return st.pgrp, nil
}

// unreaped reports whether the pinned process exists, if only as a zombie.
func (p *Proc) unreaped() bool {
	return unix.PidfdSendSignal(p.fd, 0, nil, 0) == nil
}

// Holds reports whether the pinned process still runs and holds the lock.
func (p *Proc) Holds() bool {
	_, err := p.verify()
	return err == nil
}

// Group is the pinned process's process group now (ErrGone if it no
// longer holds the lock).
func (p *Proc) Group() (int, error) { return p.verify() }

// Signal sends sig to the pinned process and to nobody else.
func (p *Proc) Signal(sig syscall.Signal) error {
	err := unix.PidfdSendSignal(p.fd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return ErrGone
	}
	if err != nil {
		return fmt.Errorf("signal pid %d: %w", p.pid, err)
	}
	return nil
}

// SignalGroup sends sig to the pinned process's group, right after showing
// that the process still holds the lock and is in that group: while it
// exists, the group's id cannot pass to anyone else. It never signals
// process group 0 or 1, crew's own group, nor any group in avoid. It
// returns the group it signalled.
func (p *Proc) SignalGroup(sig syscall.Signal, avoid ...int) (int, error) {
	pgid, err := p.verify()
	if err != nil {
		return 0, err
	}
	if err := safeGroup(pgid); err != nil {
		return 0, fmt.Errorf("pid %d: %w", p.pid, err)
	}
	if slices.Contains(avoid, pgid) {
		return 0, fmt.Errorf("pid %d: refusing to signal process group %d, which holds a crew supervisor", p.pid, pgid)
	}
	if err := unix.Kill(-pgid, sig); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return 0, ErrGone
		}
		return 0, fmt.Errorf("signal process group %d: %w", pgid, err)
	}
	return pgid, nil
}

// safeGroup refuses the process groups no run may own.
func safeGroup(pgid int) error {
	switch {
	case pgid <= 1:
		return fmt.Errorf("refusing to signal process group %d", pgid)
	case pgid == unix.Getpgrp():
		return fmt.Errorf("refusing to signal crew's own process group %d", pgid)
	}
	return nil
}

// Close releases the pidfd.
func (p *Proc) Close() {
	if p.fd >= 0 {
		_ = unix.Close(p.fd)
		p.fd = -1
	}
}

// GroupHasOthers reports whether process group pgid has a living member
// (not a zombie) other than the pids except. It reads, never signals: a
// supervisor asks it about its own command's group, whose id its unreaped
// leader pins.
func GroupHasOthers(pgid int, except ...int) (bool, error) {
	pids, err := listPIDs()
	if err != nil {
		return false, err
	}
	for _, pid := range pids {
		if slices.Contains(except, pid) {
			continue
		}
		if st, err := readStat(pid); err == nil && st.pgrp == pgid && st.state != 'Z' && st.state != 'X' {
			return true, nil
		}
	}
	return false, nil
}

// listPIDs lists the processes in /proc.
func listPIDs() ([]int, error) {
	names, err := readDirNames("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	pids := make([]int, 0, len(names))
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
