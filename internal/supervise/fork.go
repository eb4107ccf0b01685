package supervise

import (
	"io/fs"
	"os"
	"syscall"
)

// ForkDetached starts argv (an absolute path first) in a session of its
// own, with /dev/null as its stdin, stdout and stderr, and extra from fd 3
// on. It is not ours to wait for: it outlives this process. Both
// detachments use it: a run's supervisor (Detach) and a waiting start's
// background waiter. The descriptors are taken without (*os.File).Fd,
// which would turn a pipe or FIFO (the waiter's bell) blocking for both
// processes.
func ForkDetached(argv []string, dir string, env []string, extra []*os.File) error {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	fds := make([]uintptr, 0, 3+len(extra))
	for _, f := range append([]*os.File{null, null, null}, extra...) {
		fd, err := rawFD(f)
		if err != nil {
			return err
		}
		fds = append(fds, fd)
	}
	_, err = syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Dir: dir, Env: env, Files: fds,
		Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		return &fs.PathError{Op: "fork/exec", Path: argv[0], Err: err}
	}
	return nil
}

// rawFD is f's descriptor, left as it is (blocking or not); f stays open
// for as long as the caller needs the number.
func rawFD(f *os.File) (uintptr, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var fd uintptr
	if err := rc.Control(func(d uintptr) { fd = d }); err != nil {
		return 0, err
	}
	return fd, nil
}
