package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

type waitOptions struct {
	*globalOptions
	timeout time.Duration
	json    bool
}

func newWaitCmd(g *globalOptions, s streams) *cobra.Command {
	o := &waitOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "wait RUN|TASK... [--timeout D]",
		Short: "Wait for runs to finish and exit with their exit code",
		Long: `Block until every given run has finished, then exit with the run's exit code
(one run) or the first non-zero one (several, in argument order).

A TASK means its active run, else its waiting start, else its latest run. A run
that ended interrupted (its exit status is unknown) exits 125 and says why on
stderr. With --timeout, exit 75 if the runs have not finished in time (124 is
a run's own exit code when its --timeout ran out).`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeRuns(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			markRan(cmd)
			return o.run(args, s)
		},
	}
	cmd.Flags().Var(duration.NewValue(&o.timeout, 0), "timeout", "give up after this long (exit 75); 0 waits forever")
	cmd.Flags().BoolVar(&o.json, "json", false, `print {"version": 1, "runs": [RUN...], "exitCode": N, "gaveUp": false}`)
	return cmd
}

// waitGaveUpError is a wait whose --timeout ran out before its runs
// ended: exit 75, apart from 124, a run's own timeout.
type waitGaveUpError struct{ msg string }

func (e *waitGaveUpError) Error() string { return e.msg }

func (o *waitOptions) run(args []string, s streams) error {
	if o.timeout < 0 {
		return &usageError{fmt.Errorf("--timeout must not be negative, not %s", o.timeout)}
	}
	d, err := o.open(openOptions{})
	if err != nil {
		return err
	}
	defer d.Close()
	ids := make([]record.RunID, len(args))
	for i, a := range args {
		if ids[i], err = d.Resolve(a); err != nil {
			return err
		}
	}
	ctx := context.Background()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	var views []*vocab.RunView
	code := 0
	for i, id := range ids {
		rec, err := d.WaitRun(ctx, id)
		if errors.Is(err, vocab.ErrWaitTimeout) {
			return o.gaveUp(d, s, views, ids[i:])
		}
		if err != nil {
			return err
		}
		c := exitCodeFor(runOutcome(s, rec))
		if code == 0 {
			code = c
		}
		if v, err := d.Run(id); err == nil {
			views = append(views, v)
		} else {
			views = append(views, &vocab.RunView{Run: *rec}) // pruned since: what the wait read
		}
	}
	if o.json {
		if err := writeJSON(s.Out, map[string]any{"version": 1, "runs": views, "exitCode": code, "gaveUp": false}); err != nil {
			return err
		}
	}
	if code != 0 {
		return &exitStatus{code}
	}
	return nil
}

// gaveUp ends a wait whose --timeout ran out while pending (the first of
// them the one waited for) had not finished: with --json, every run as it
// is now (the finished ones in views, then the pending ones, those that
// can be read), and exit 75.
func (o *waitOptions) gaveUp(d *dispatch.Dispatcher, s streams, views []*vocab.RunView, pending []record.RunID) error {
	err := &waitGaveUpError{fmt.Sprintf("%s: gave up after %s: run %s has not finished (crew wait exits %d)",
		quoteTask(d.TaskOf(pending[0])), duration.Format(o.timeout), pending[0], exitWaitGaveUp)}
	if !o.json {
		return err
	}
	for _, id := range pending {
		if v, err := d.Run(id); err == nil {
			views = append(views, v)
		}
	}
	if werr := writeJSON(s.Out, map[string]any{"version": 1, "runs": views, "exitCode": exitWaitGaveUp, "gaveUp": true}); werr != nil {
		return werr
	}
	return err
}

// runOutcome is a finished run's exit status as crew wait and crew logs -f
// report it: the command's own, or crew's failure (said on stderr) for a
// run whose exit status is unknown.
func runOutcome(s streams, rec *record.Run) error {
	switch {
	case rec.NeverAdmitted && rec.ExitCode != nil:
		// A start that waited in the background and left the line: its
		// command never ran, and the exit code is the one crew start
		// would have exited with.
		fmt.Fprintf(s.Err, "crew: %s: run %s never ran: it left the queue %s: %s\n", quoteTask(rec.Task), rec.RunID, termSafe(string(rec.State)), termSafe(rec.Reason))
		return &exitStatus{*rec.ExitCode}
	case rec.ExitCode == nil:
		fmt.Fprintf(s.Err, "crew: %s: run %s ended %s with no exit status: %s\n", quoteTask(rec.Task), rec.RunID, termSafe(string(rec.State)), termSafe(rec.Reason))
		return &exitStatus{exitCrewFailure}
	case *rec.ExitCode != 0:
		return &exitStatus{*rec.ExitCode}
	}
	return nil
}
