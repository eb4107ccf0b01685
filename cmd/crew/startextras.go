package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/bytesize"
	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

// startExtras are crew start's --tag and --log-max.
type startExtras struct {
	tag    bool
	logMax int64
}

func (x *startExtras) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&x.tag, "tag", false, "prefix each line of the command's output with the task name and a tab (like parallel --tag; the log keeps it untagged)")
	f.Var(bytesize.NewValue(&x.logMax, 0), "log-max", "cap the run's log, keeping its first half and the newest output (10MiB, 1GB; 0: no cap); default: crew.json's logMax")
}

// check validates the flags and returns the run's log cap as
// dispatch.AdmitRequest takes it.
func (x *startExtras) check(cmd *cobra.Command, detach bool) (int64, error) {
	if x.tag && detach {
		return 0, &usageError{errors.New("--tag and --detach do not go together: a detached run's output goes only to its log, which is never tagged")}
	}
	if !cmd.Flags().Changed("log-max") {
		return 0, nil // crew.json's
	}
	switch {
	case x.logMax == 0:
		return dispatch.LogMaxNone, nil
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
	var cfg *runstore.ConfigError
	if err == nil || silent(err) || exitCodeFor(err) == exitUsage || errors.As(err, &cfg) {
		return err
	}
	return &taskError{task: task, err: err}
}
