package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/bytesize"
	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// startExtras are crew start's --tag, --log-max, --timeout, --retries
// and --retry-delay.
type startExtras struct {
	tag        bool
	logMax     int64
	timeout    time.Duration
	retries    int
	retryDelay time.Duration
}

func (x *startExtras) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&x.tag, "tag", false, "prefix each line of the command's output with the task name and a tab (like parallel --tag; the log keeps it untagged)")
	f.Var(bytesize.NewValue(&x.logMax, 0), "log-max", "cap the run's log, keeping its first half and the newest output (10MiB, 1GB; 0: no cap); default: crew.json's logMax")
	f.Var(duration.NewValue(&x.timeout, 0), "timeout", "stop the command (SIGTERM, then SIGKILL after --grace) once it has run this long, per attempt; the run is recorded as timed out and crew exits 124; 0: no timeout, as without the flag")
	f.Lookup("timeout").DefValue = "none"
	f.IntVar(&x.retries, "retries", 0, fmt.Sprintf("run a failed command (non-zero exit, killed, timed out; not stopped) again, up to `N` more times (at most %d), keeping the slot", record.MaxRetries))
	f.Var(duration.NewValue(&x.retryDelay, time.Second), "retry-delay", "time between a failed attempt and the next (with --retries)")
}

// checkRetries validates --timeout, --retries and --retry-delay.
func (x *startExtras) checkRetries(cmd *cobra.Command) error {
	changed := cmd.Flags().Changed
	switch {
	case x.timeout < 0:
		return &usageError{fmt.Errorf("--timeout must not be negative, not %s: give how long the command may run, as in --timeout=10m (0: no timeout)", duration.Format(x.timeout))}
	case x.retries < 0 || x.retries > record.MaxRetries:
		return &usageError{fmt.Errorf("--retries must be from 0 to %d, not %d", record.MaxRetries, x.retries)}
	case x.retryDelay < 0:
		return &usageError{fmt.Errorf("--retry-delay must not be negative, not %s", duration.Format(x.retryDelay))}
	case changed("retry-delay") && x.retries == 0:
		return &usageError{errors.New("--retry-delay goes with --retries N: without retries there is nothing to wait for")}
	}
	return nil
}

// check validates the flags and returns the run's log cap as
// vocab.AdmitRequest takes it.
func (x *startExtras) check(cmd *cobra.Command, detach bool) (int64, error) {
	if err := x.checkRetries(cmd); err != nil {
		return 0, err
	}
	if x.tag && detach {
		return 0, &usageError{errors.New("--tag and --detach do not go together: a detached run's output goes only to its log, which is never tagged")}
	}
	if !cmd.Flags().Changed("log-max") {
		return 0, nil // crew.json's
	}
	switch {
	case x.logMax == 0:
		return vocab.LogMaxNone, nil
	case x.logMax < record.MinLogMax:
		return 0, &usageError{fmt.Errorf("--log-max %s is too small: the least is %s (or 0 for no cap)", bytesize.Flag(x.logMax), bytesize.Flag(record.MinLogMax))}
	}
	return x.logMax, nil
}

// taskError is an error of crew start about its run, which names the task
// so that in a CI log of parallel starts each line says whose it is.
type taskError struct {
	task string
	err  error
}

func (e *taskError) Error() string { return quoteTask(e.task) + ": " + e.err.Error() }
func (e *taskError) Unwrap() error { return e.err }

// aboutTask names the task in err, unless err is nil, no message, a
// usage error (about the command line, not a run) or an unusable
// crew.json (whose message starts PATH:LINE:COL, compiler-style, for
// editors to jump to).
func aboutTask(task string, err error) error {
	var cfg *vocab.ConfigError
	if err == nil || silent(err) || exitCodeFor(err) == exitUsage || errors.As(err, &cfg) {
		return err
	}
	return &taskError{task: task, err: err}
}
