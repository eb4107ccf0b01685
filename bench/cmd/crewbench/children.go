package main

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// children are long-lived crew processes the harness started itself (runs
// holding slots, waiters). They are the harness's own children, signalled
// through their *os.Process (a pidfd on Linux), so stopping them can never
// hit a process that is not ours. stop is registered at clean-up too, so
// ^C or a failed scenario leaves none behind.
type children struct {
	label  string
	cmds   []*exec.Cmd
	errs   []error
	stderr string
	once   sync.Once
}

// spawn starts n processes, argv(i) each, stderr to a file of the work
// directory.
func (h *harness) spawn(label string, n int, argv func(i int) []string) (*children, error) {
	c := &children{label: label, stderr: h.path("stderr", fmt.Sprintf("%s-%d.txt", label, h.seq()))}
	h.atCleanup(c.stop)
	f, err := os.OpenFile(c.stderr, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return c, fmt.Errorf("%s: %w", label, err)
	}
	defer f.Close()
	for i := range n {
		args := argv(i)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env, cmd.Stderr = h.env, f
		if err := cmd.Start(); err != nil {
			return c, fmt.Errorf("%s: start %d of %d: %w", label, i+1, n, err)
		}
		c.cmds = append(c.cmds, cmd)
	}
	return c, nil
}

// stop sends SIGTERM to every child (crew forwards it to the command's
// process group and records the run as stopped; a waiter leaves the queue)
// and reaps them all. Only the first call does anything.
func (c *children) stop() {
	c.once.Do(func() {
		for _, cmd := range c.cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		c.reap(30 * time.Second)
	})
}

// wait reaps children that end by themselves, for at most limit; those
// still running then are killed. It returns the first failure.
func (c *children) wait(limit time.Duration) error {
	var err error
	c.once.Do(func() { err = c.reap(limit) })
	return err
}

// reap waits for every child; after limit, it kills the rest with SIGKILL
// (crew's owner locks die with it; nothing is left holding a slot).
func (c *children) reap(limit time.Duration) error {
	done := make(chan struct{})
	timer := time.AfterFunc(limit, func() {
		select {
		case <-done:
		default:
			for _, cmd := range c.cmds {
				_ = cmd.Process.Kill()
			}
		}
	})
	defer timer.Stop()
	for _, cmd := range c.cmds {
		if err := cmd.Wait(); err != nil {
			c.errs = append(c.errs, fmt.Errorf("%s: %s: %w", c.label, cmd.String(), err))
		}
	}
	close(done)
	if len(c.errs) > 0 {
		msg, _ := os.ReadFile(c.stderr)
		return fmt.Errorf("%d of %d failed: %w; stderr: %s", len(c.errs), len(c.cmds), c.errs[0], tail(msg, 400))
	}
	return nil
}

func (c *children) pids() []int {
	out := make([]int, len(c.cmds))
	for i, cmd := range c.cmds {
		out[i] = cmd.Process.Pid
	}
	return out
}
