package rootfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// Mkfifo creates the FIFO name in dir, relative to the directory's own
// descriptor (no path is resolved again).
func Mkfifo(dir *os.Root, name string, perm os.FileMode) error {
	d, err := dir.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Mkfifoat(int(d.Fd()), name, uint32(perm.Perm())); err != nil {
		return &os.PathError{Op: "mkfifo", Path: name, Err: err}
	}
	return fifoPerm(dir, name, perm)
}
