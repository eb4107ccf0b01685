//go:build !linux

package rootfs

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Mkfifo creates the FIFO name in dir. golang.org/x/sys has no mkfifoat
// outside Linux, so the directory's path is used; OpenFIFO then checks
// that what is at the name is a FIFO inside dir before anyone uses it.
func Mkfifo(dir *os.Root, name string, perm os.FileMode) error {
	if err := unix.Mkfifo(filepath.Join(dir.Name(), name), uint32(perm.Perm())); err != nil {
		return &os.PathError{Op: "mkfifo", Path: name, Err: err}
	}
	return fifoPerm(dir, name, perm)
}
