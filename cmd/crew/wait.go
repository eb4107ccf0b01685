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
	labels  labelsFlag // --label: every run that carries them
}

func newWaitCmd(g *globalOptions, s streams) *cobra.Command {
	o := &waitOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "wait RUN|TASK...|--label KEY=VALUE... [--timeout D]",
		Short: "Wait for runs to finish and exit with their exit code",
		Long: `Block until every given run has finished, then exit with the run's exit code
(one run) or the first non-zero one (several, in argument order).

With --label KEY=VALUE (repeatable: runs that carry all of them) instead of
RUN|TASK, wait for every run with the label when crew wait begins: waiting,
active and finished (those retention kept). If any did not succeed, list
them on stderr and exit with the first one's code (in the order the runs
were created). No run with the label is a usage error (exit 64).

A TASK means its active run, else its waiting start, else its latest run. A run
that ended interrupted (its exit status is unknown) exits 125 and says why on
stderr. With --timeout, exit 75 if the runs have not finished in time (124 is
a run's own exit code when its --timeout ran out).`,
		ValidArgsFunction: completeRuns(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			markRan(cmd)
			return o.run(args, s)
		},
	}
	cmd.Flags().Var(duration.NewValue(&o.timeout, 0), "timeout", "give up after this long (exit 75); 0 waits forever")
	cmd.Flags().Var(&o.labels, "label", "wait for every run that carries this label (repeatable: all of them), instead of RUN|TASK")
	cmd.Flags().BoolVar(&o.json, "json", false, `print {"version": 1, "runs": [RUN...], "exitCode": N, "gaveUp": false}`)
	return cmd
}

// waitGaveUpError is a wait whose --timeout ran out before its runs
// ended: exit 75, apart from 124, a run's own timeout.
type waitGaveUpError struct{ msg string }

func (e *waitGaveUpError) Error() string { return e.msg }

func (o *waitOptions) run(args []string, s streams) error {
	switch {
	case o.timeout < 0:
		return &usageError{fmt.Errorf("--timeout must not be negative, not %s", o.timeout)}
	case len(args) == 0 && len(o.labels.labels) == 0:
		return &usageError{errors.New("give the runs to wait for: RUN or TASK arguments, or --label KEY=VALUE")}
	case len(args) > 0 && len(o.labels.labels) > 0:
		return &usageError{fmt.Errorf("give RUN|TASK arguments or --label, not both (got %q and --label %s)", args, o.labels.String())}
	}
	d, err := o.open(openOptions{})
	if err != nil {
		return err
	}
	defer d.Close()
	ids, err := o.runsToWaitFor(d, args)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	var views []*vocab.RunView
	var failed []*record.Run
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
		if c != 0 {
			failed = append(failed, rec)
		}
		if v, err := d.Run(id); err == nil {
			views = append(views, v)
		} else {
			v := vocab.ViewOf(rec) // pruned since: what the wait read
			views = append(views, &v)
		}
	}
	if len(o.labels.labels) > 0 && len(failed) > 0 {
		o.printFailed(s, failed, len(ids))
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

// runsToWaitFor resolves the RUN|TASK arguments, or lists the runs with
// the --label labels (none is a usage error: a label mistyped, or a
// pipeline whose runs have not started, must not pass as success).
func (o *waitOptions) runsToWaitFor(d *dispatch.Dispatcher, args []string) ([]record.RunID, error) {
	if len(o.labels.labels) > 0 {
		ids, err := d.Labelled(o.labels.labels)
		if err == nil && len(ids) == 0 {
			err = &usageError{fmt.Errorf("no run has the label %s in %s (waiting, active or finished); crew wait --label waits only for runs started before it",
				termSafe(o.labels.String()), d.Store.Where())}
		}
		return ids, err
	}
	ids := make([]record.RunID, len(args))
	for i, a := range args {
		var err error
		if ids[i], err = d.Resolve(a); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// printFailed lists the runs with the labels that did not succeed, as GNU
// parallel reports its failed jobs: how many of all, then one line each.
func (o *waitOptions) printFailed(s streams, failed []*record.Run, all int) {
	fmt.Fprintf(s.Err, "crew: %d of %d runs with label %s did not succeed:\n", len(failed), all, termSafe(o.labels.String()))
	for _, r := range failed {
		how := "exit status unknown"
		if r.ExitCode != nil {
			how = fmt.Sprintf("exit %d", *r.ExitCode)
		}
		fmt.Fprintf(s.Err, "  %s  %s  %s, %s\n", r.RunID, quoteTask(r.Task), stateWord(*r), how)
	}
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
