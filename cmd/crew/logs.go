package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runlog"
)

type logsOptions struct {
	*globalOptions
	follow bool
}

func newLogsCmd(g *globalOptions, s streams) *cobra.Command {
	o := &logsOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "logs RUN|TASK [-f]",
		Short: "Print a run's output",
		Long: `Print the output (stdout and stderr, each in the order written) of a run, from its
log in the state root. With -f, keep printing what the run writes until it ends,
then exit with the same code as crew wait. Works for foreground and detached
runs, and while the run is writing. A log capped with --log-max shows its
beginning, a marker line saying how many bytes were dropped, and its newest
output (and, with -f, a marker wherever the follower fell behind the cap).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRuns(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			markRan(cmd)
			return o.run(args[0], s)
		},
	}
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "follow the log until the run ends")
	return cmd
}

func (o *logsOptions) run(arg string, s streams) error {
	d, err := o.open(openOptions{})
	if err != nil {
		return err
	}
	defer d.Close()
	id, err := d.Resolve(arg)
	if err != nil {
		return err
	}
	if err := d.LogHere(id); err != nil {
		return &noLogError{err.Error()}
	}
	return o.show(d, id, s)
}

// show prints run id's log from this host's state root; the store the
// run is recorded in says when it is over.
func (o *logsOptions) show(d *dispatch.Dispatcher, id record.RunID, s streams) error {
	if !o.follow {
		r := d.OpenLog(id)
		defer r.Close()
		n, err := r.Copy(s.Out)
		if errors.Is(err, os.ErrNotExist) || (err == nil && n == 0 && neverStarted(d, id)) {
			return &noLogError{fmt.Sprintf("%s: run %s has no log (it never started a command)", quoteTask(d.TaskOf(id)), id)}
		}
		return err
	}
	return o.follow1(d, id, s)
}

// neverStarted reports whether the run's record says it ended without
// ever starting its command (command not found, stopped while waiting to
// start): its log, made before the command's launch, is empty then, and
// the run has no output to show.
func neverStarted(d *dispatch.Dispatcher, id record.RunID) bool {
	v, err := d.Run(id)
	return err == nil && !v.State.Active() && v.StartedAt == nil
}

// noLogError is a run without a log file: exit 1.
type noLogError struct{ msg string }

func (e *noLogError) Error() string { return e.msg }

// follow1 copies the log as it grows until the run is final and the log
// fully read.
func (o *logsOptions) follow1(d *dispatch.Dispatcher, id record.RunID, s streams) error {
	done := make(chan *record.Run, 1)
	errc := make(chan error, 1)
	go func() {
		rec, err := d.WaitRun(context.Background(), id)
		if err != nil {
			errc <- err
			return
		}
		done <- rec
	}()
	// The reader is made once the log exists: by then the run's record
	// says whether the log is capped (a waiting start has no record yet).
	var r *runlog.Reader
	defer func() {
		if r != nil {
			r.Close()
		}
	}()
	var final *record.Run
	for {
		if r == nil {
			switch f, err := d.Logs.Logs().OpenLog(id); {
			case err == nil:
				f.Close()
				r = d.OpenLog(id)
			case !errors.Is(err, os.ErrNotExist):
				// Something other than a log is at its name (a link, a
				// FIFO): never followed, never waited on.
				return err
			}
		}
		if r != nil {
			if _, err := r.Copy(s.Out); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if final != nil {
			break // drained after the run ended
		}
		select {
		case final = <-done:
		case err := <-errc:
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
	return runOutcome(s, final)
}
