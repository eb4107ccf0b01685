//go:build !linux

package lockfs

import "errors"

// HeldInKernel cannot be answered here: there is no kernel lock table to
// read (/proc/locks), so crew cannot prove anything about a lock file that
// was replaced under its holder.
func HeldInKernel(dev, ino uint64) (bool, error) {
	return false, errors.New("this system has no /proc/locks to tell whether a replaced lock file is still held")
}

// WriteLocks has no kernel lock table to read here: every lock is probed.
func WriteLocks() (map[[2]uint64]bool, error) {
	return nil, errors.New("this system has no /proc/locks")
}
