package main

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/vocab"
)

// Which endings make crew die by SIGINT or SIGQUIT (issue 24, item 1):
// a run ended by one typed at the terminal (its job gets it too), or by
// one crew received; never crew's own failure, a refusal, a crew stop, or
// SIGTERM and SIGHUP.
func TestInterrupted(t *testing.T) {
	typed := &vocab.ExitError{Code: 130, TerminalInterrupt: syscall.SIGINT}
	cases := []struct {
		name     string
		err      error
		received syscall.Signal
		sig      syscall.Signal
		job      bool
	}{
		{"typed at the terminal", typed, 0, syscall.SIGINT, true},
		{"typed, named by crew start", &taskError{task: "t", err: &vocab.ExitError{Code: 131, TerminalInterrupt: syscall.SIGQUIT}}, 0, syscall.SIGQUIT, true},
		{"received, command stopped", &vocab.ExitError{Code: 130}, syscall.SIGINT, syscall.SIGINT, false},
		{"received, command exited 0 after it", nil, syscall.SIGQUIT, syscall.SIGQUIT, false},
		{"received in line", &vocab.SignalledError{Signal: syscall.SIGINT}, syscall.SIGINT, syscall.SIGINT, false},
		{"received before launch", &vocab.SignalledError{Signal: syscall.SIGINT, RunID: "r-1"}, 0, syscall.SIGINT, false},
		{"the command's own 130", &vocab.ExitError{Code: 130}, 0, 0, false},
		{"SIGTERM received", &vocab.ExitError{Code: 143}, 0, 0, false},
		{"SIGTERM in line", &vocab.SignalledError{Signal: syscall.SIGTERM}, 0, 0, false},
		{"crew stop, in line", &vocab.SignalledError{Signal: syscall.SIGINT, By: "crew stop (pid 1, uid 0)"}, 0, 0, false},
		{"crew's own failure", &vocab.InternalError{Err: errors.New("disk")}, syscall.SIGINT, 0, false},
		{"a refusal", &chosenRefusal{err: errors.New("busy"), code: -1}, syscall.SIGINT, 0, false},
		{"nothing", nil, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := interrupted(c.err, c.received)
			var intr *interruptedError
			if c.sig == 0 {
				assert.False(t, errors.As(got, &intr), "not interrupted: %v", got)
				assert.Equal(t, c.err, got)
				return
			}
			require.True(t, errors.As(got, &intr), "interrupted: %v", got)
			assert.Equal(t, c.sig, intr.sig)
			assert.Equal(t, c.job, intr.job)
			assert.Equal(t, 128+int(c.sig), exitCodeFor(got), "the exit code if dying by it fails")
			assert.Equal(t, c.err == nil || silent(c.err), silent(got), "says what the outcome says")
		})
	}
}

// The relay passes every signal on, in order, when it is taken, and
// tells the first SIGINT or SIGQUIT taken from the first that came and was
// not: one the store never took did not end the run.
func TestSignalRelay(t *testing.T) {
	in := make(chan os.Signal, 4)
	r := relaySignals(in)
	in <- syscall.SIGTERM
	assert.Equal(t, syscall.SIGTERM, <-r.out)
	in <- syscall.SIGQUIT
	in <- syscall.SIGINT
	assert.Equal(t, syscall.SIGQUIT, <-r.out)
	assert.Equal(t, syscall.SIGINT, <-r.out)
	in <- syscall.SIGHUP
	in <- syscall.SIGINT
	taken, pending := r.finish()
	assert.Equal(t, syscall.SIGQUIT, taken, "the first taken")
	assert.Equal(t, syscall.SIGINT, pending, "came, not taken")
	taken2, pending2 := r.finish()
	assert.Equal(t, [2]syscall.Signal{taken, pending}, [2]syscall.Signal{taken2, pending2}, "finish is idempotent")

	r = relaySignals(make(chan os.Signal, 4))
	taken, pending = r.finish()
	assert.Zero(t, taken)
	assert.Zero(t, pending)
}
