package e2e

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// needScript skips the test where script(1) is missing.
func needScript(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script(1) from util-linux is needed to run crew on a terminal")
	}
}

// onTTY runs crew inside a pseudo-terminal (util-linux script), feeding
// input to the terminal (input may wait for what the terminal has shown so
// far), and returns what the terminal showed. Call it from the test's
// goroutine; goroutines use tryOnTTY.
func (e *env) onTTY(t *testing.T, input func(w io.Writer, shown func() string), args ...string) string {
	t.Helper()
	needScript(t)
	out, err := e.tryOnTTY(input, args...)
	require.NoError(t, err)
	return out
}

// tryOnTTY is onTTY for any goroutine: it never fails the test itself
// (input must not either).
func (e *env) tryOnTTY(input func(w io.Writer, shown func() string), args ...string) (string, error) {
	quoted := []string{e.bin}
	for _, a := range args {
		quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "script", "-qec", strings.Join(quoted, " "), "/dev/null")
	cmd.Env = e.environ()
	cmd.Dir = e.dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	input(stdin, out.String)
	err = cmd.Wait()
	if ctx.Err() != nil {
		return out.String(), fmt.Errorf("crew on a terminal hung (%w); output:\n%s", ctx.Err(), out.String())
	}
	_ = err // script's own exit status is not crew's on every util-linux version
	_ = stdin.Close()
	return out.String(), nil
}

// TestTerminalCommandOwnsTheTerminal: on a terminal, the command's process
// group is the terminal's foreground group, so it can read from the
// terminal (instead of being stopped by SIGTTIN) and Ctrl-C reaches it.
func TestTerminalCommandOwnsTheTerminal(t *testing.T) {
	e := newEnv(t)
	out := e.onTTY(t, func(w io.Writer, shown func() string) {
		_, _ = io.WriteString(w, "hello\n")
		eventually(t, 10*time.Second, "the command to read the line", func() bool { return strings.Contains(shown(), "got:hello") })
	}, "start", "reader", "--", "sh", "-c", `read x; echo "got:$x"`)
	assert.Contains(t, out, "got:hello")
	s := e.status("reader")
	require.Len(t, s.Finished, 1)
	assert.Equal(t, "succeeded", s.Finished[0].State)

	gate, _ := e.gate("never")
	e.onTTY(t, func(w io.Writer, _ func() string) {
		// Wait until the command runs, then press Ctrl-C.
		eventually(t, 10*time.Second, "the command to run", func() bool {
			for _, r := range e.status().Active {
				if r.Task == "interrupted" && r.State == "running" {
					return true
				}
			}
			return false
		})
		_, _ = io.WriteString(w, "\x03")
		eventually(t, 10*time.Second, "the run to end", func() bool { return len(e.status("interrupted").Finished) == 1 })
	}, append([]string{"start", "interrupted", "--"}, waitCmd(gate)...)...)
	s = e.status("interrupted")
	require.Len(t, s.Finished, 1)
	assert.Equal(t, "stopped", s.Finished[0].State)
	assert.Equal(t, "SIGINT", s.Finished[0].Signal)
	assert.Contains(t, s.Finished[0].Reason, "interrupted from the terminal (SIGINT)")
}

// TestWaitLineOnTerminal: on a terminal a waiting start keeps one line up
// to date (carriage return, clear line) instead of printing a line per
// update.
func TestWaitLineOnTerminal(t *testing.T) {
	e := newEnv(t)
	e.initMax(1)
	needScript(t)
	release, holder := e.holdSlot("holder")
	type ttyResult struct {
		out string
		err error
	}
	done := make(chan ttyResult, 1)
	terminal := make(chan func() string, 1)
	go func() {
		out, err := e.tryOnTTY(func(w io.Writer, shown func() string) {
			terminal <- shown
			// Keep the terminal's input open until crew is admitted.
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !strings.Contains(shown(), "admitted as run"); {
				time.Sleep(10 * time.Millisecond)
			}
		}, "start", "--wait", "waiter", "--", "true")
		done <- ttyResult{out, err}
	}()
	e.waitQueued("waiter")
	shown := <-terminal
	eventually(t, 15*time.Second, "the waiting line to be redrawn", func() bool {
		return strings.Count(shown(), "\r\x1b[Kcrew: waiter: waiting") >= 2
	})
	release()
	holder.wait(t, 10*time.Second)
	res := <-done
	require.NoError(t, res.err)
	out := res.out
	assert.Contains(t, out, "\r\x1b[Kcrew: waiter: waiting for a slot: 1st in line, 1/1 slots busy (oldest: holder ")
	assert.GreaterOrEqual(t, strings.Count(out, "\r\x1b[K"), 2, "the line was redrawn in place")
	assert.Contains(t, out, "crew: waiter: admitted as run ")
	assert.Equal(t, strings.Count(out, "crew: waiter: waiting"), strings.Count(out, "\r\x1b[Kcrew: waiter: waiting"),
		"every waiting line was drawn over the previous one")
}
