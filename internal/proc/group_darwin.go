//go:build darwin

package proc

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// sZomb is p_stat of a zombie (sys/proc.h).
const sZomb = 5

// GroupHasOthers reports whether process group pgid has a living member
// (not a zombie) other than the pids except, from the kernel's process table.
func GroupHasOthers(pgid int, except ...int) (bool, error) {
	procs, err := unix.SysctlKinfoProcSlice("kern.proc.pgrp", pgid)
	if err != nil {
		return false, fmt.Errorf("list process group %d: %w", pgid, err)
	}
	for _, kp := range procs {
		if !slices.Contains(except, int(kp.Proc.P_pid)) && kp.Proc.P_stat != sZomb {
			return true, nil
		}
	}
	return false, nil
}
