package supervise

import (
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

// Only crew's own shortages are crew's failure; what is wrong with the
// command stays 126/127.
func TestShortOf(t *testing.T) {
	exec := func(errno syscall.Errno) error { return &fs.PathError{Op: "fork/exec", Path: "/bin/x", Err: errno} }
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.EAGAIN, syscall.ENOMEM} {
		if _, ok := shortOf(exec(errno)); !ok {
			t.Errorf("%v is not classified as crew's shortage", errno)
		}
	}
	for _, errno := range []syscall.Errno{syscall.EACCES, syscall.ENOENT, syscall.ENOEXEC, syscall.E2BIG, syscall.ETXTBSY} {
		if what, ok := shortOf(fmt.Errorf("start: %w", exec(errno))); ok {
			t.Errorf("%v is classified as crew's shortage (%s); it is the command's", errno, what)
		}
	}
}
