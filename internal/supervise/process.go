package supervise

import (
	"cmp"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
)

// child is a process crew started and reaps itself.
//
// It is started with syscall.ForkExec rather than os/exec: os.StartProcess
// first probes whether the kernel supports pidfds by forking a throwaway
// child, once per process, and a crew start is one process start (that
// probe was a tenth of a start's cost on these machines). crew needs none
// of what os/exec adds: it has its own pipes, and waits with waitid.
type child struct {
	pid    int
	ws     syscall.WaitStatus
	reaped bool
	stdin  *os.File // the write end of a pipe feeding a non-file stdin, if any
}

// startChild starts argv (argv[0] looked up in $PATH as a shell would)
// with the given descriptors: stdin, stdout, stderr, then extra ones as 3,
// 4, ... A stdin that is not a file is fed through a pipe; a nil stdout or
// stderr is /dev/null. Errors are the
// same as exec.Cmd.Start's: exec.ErrNotFound, or a *fs.PathError with
// op "fork/exec" wrapping the errno.
func startChild(argv []string, dir string, env []string, stdin io.Reader, stdout, stderr *os.File, extra []*os.File, sys *syscall.SysProcAttr) (*child, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, err
	}
	in, feed, err := stdinFile(stdin)
	if err != nil {
		return nil, err
	}
	if stdout == nil || stderr == nil {
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		defer null.Close()
		stdout, stderr = cmp.Or(stdout, null), cmp.Or(stderr, null)
	}
	files := []uintptr{in.Fd(), stdout.Fd(), stderr.Fd()}
	for _, f := range extra {
		files = append(files, f.Fd())
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Dir: dir, Env: env, Files: files, Sys: sys})
	if feed != nil {
		_ = in.Close() // the child has its own copy of the read end
	}
	if err != nil {
		if feed != nil {
			_ = feed.Close()
		}
		return nil, &fs.PathError{Op: "fork/exec", Path: path, Err: err}
	}
	c := &child{pid: pid}
	if feed != nil {
		c.stdin = feed
		go func() {
			_, _ = io.Copy(feed, stdin)
			_ = feed.Close()
		}()
	}
	return c, nil
}

// stdinFile is the file the command reads as stdin: stdin itself if it is
// a file, /dev/null for none, else the read end of a pipe whose write end
// (feed) the caller fills.
func stdinFile(stdin io.Reader) (in, feed *os.File, err error) {
	switch r := stdin.(type) {
	case nil:
		in, err = os.Open(os.DevNull)
		return in, nil, err
	case *os.File:
		return r, nil, nil
	}
	in, feed, err = os.Pipe()
	return in, feed, err
}

// reap waits for the child's exit and collects its status. Reaping twice
// is harmless.
func (c *child) reap() syscall.WaitStatus {
	for !c.reaped {
		_, err := syscall.Wait4(c.pid, &c.ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		c.reaped = true
	}
	return c.ws
}
