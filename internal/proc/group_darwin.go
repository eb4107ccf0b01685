//go:build darwin

package proc

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// sZomb is p_stat of a zombie (sys/proc.h).
const sZomb = 5

// GroupHasOthers reports whether process group pgid has a living member
// (not a zombie) other than pid except, from the kernel's process table.
func GroupHasOthers(pgid, except int) (bool, error) {
	procs, err := unix.SysctlKinfoProcSlice("kern.proc.pgrp", pgid)
	if err != nil {
		return false, fmt.Errorf("list process group %d: %w", pgid, err)
	}
	for _, kp := range procs {
		if int(kp.Proc.P_pid) != except && kp.Proc.P_stat != sZomb {
			return true, nil
		}
	}
	return false, nil
}
