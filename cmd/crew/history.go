package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

type historyOptions struct {
	*globalOptions
	failed bool
	since  time.Duration
	limit  int
	json   bool
	labels labelsFlag // --label: only runs that carry them
}

func newHistoryCmd(g *globalOptions, s streams) *cobra.Command {
	o := &historyOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "history [TASK] [--failed] [--since D] [--label KEY=VALUE]... [--limit N] [--json]",
		Short: "List finished runs, newest finish first",
		Long: `List finished runs, newest finish first: run id, task, state, exit code,
start, duration and reason. With TASK, only that task's runs; with --label
KEY=VALUE (repeatable), only runs that carry every label given. A list cut
short by --limit (20 by default) says so under it ("more": true in --json).

history reads the index of finished runs (runs/finished.idx in the state root)
and the records of the runs it shows, so it stays fast with 100,000 finished
runs (a --label filter reads the records of the runs it passes over too).
Where the index is missing (a state root of an older crew), it reads the
records themselves and says so; crew recover builds the index.
history never takes the admission lock and never creates or changes a file.`,
		Example: `  crew history                     # the 20 latest finishes
  crew history build --failed      # build's runs that did not succeed
  crew history --since 1h --limit 0 --json`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeRuns(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			markRan(cmd)
			return o.run(args, s)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.failed, "failed", false, "only runs that did not succeed (failed, stopped, interrupted)")
	f.Var(duration.NewValue(&o.since, 0), "since", "only runs that finished within this long ago, such as 90m, 24h or 7d")
	f.IntVar(&o.limit, "limit", 20, "show at most N runs; 0 shows every match")
	f.Var(&o.labels, "label", "only runs with this label (repeatable: all of them)")
	f.BoolVar(&o.json, "json", false, `print {"version": 1, "runs": [RUN...], "limit": N, "more": false, "problems": [...]} (RUN as in crew status)`)
	return cmd
}

func (o *historyOptions) run(args []string, s streams) error {
	switch {
	case o.limit < 0:
		return &usageError{fmt.Errorf("--limit must be 0 (no limit) or more, not %d", o.limit)}
	case o.since < 0:
		return &usageError{fmt.Errorf("--since must not be negative, not %s", o.since)}
	}
	q := vocab.HistoryQuery{Failed: o.failed, Limit: o.limit, Labels: o.labels.labels}
	if len(args) == 1 {
		q.Task = args[0]
		if err := record.ValidateTask(q.Task); err != nil {
			return &usageError{fmt.Errorf("invalid task name: %w", err)}
		}
	}
	now := time.Now()
	if o.since > 0 {
		q.Since = now.Add(-o.since)
	}
	h, err := o.history(q)
	if err != nil {
		return err
	}
	if h.Unindexed != "" {
		fmt.Fprintf(s.Err, "crew: note: %s, so these runs were found from their records (slower); `crew recover` builds it\n", termSafe(h.Unindexed))
	}
	if o.json {
		for _, p := range h.Problems {
			fmt.Fprintf(s.Err, "crew: warning: %s\n", termSafe(p.Error))
		}
		return writeJSON(s.Out, h)
	}
	if len(h.Runs) == 0 {
		fmt.Fprintln(s.Out, "no finished runs")
	} else {
		printFinished(s.Out, screenFor(s.Out, o.getenv), h.Runs, now, q.Task == "")
	}
	if h.More {
		fmt.Fprintf(s.Out, "(the newest %d; more match: --limit 0 shows them all)\n", len(h.Runs))
	}
	printHistoryProblems(s.Out, h.Problems)
	return nil
}

// printHistoryProblems lists what history could not show: finished
// records crew cannot read (each may be a run that belongs in the list),
// and what is wrong with the index of finished runs.
func printHistoryProblems(w io.Writer, problems []vocab.Problem) {
	if len(problems) == 0 {
		return
	}
	fmt.Fprintln(w, "\nProblems:")
	for _, p := range problems {
		fmt.Fprintf(w, "  %s\n", termSafe(p.Error))
	}
}

// history reads the store's history.
func (o *historyOptions) history(q vocab.HistoryQuery) (*vocab.History, error) {
	d, err := o.open(openOptions{})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.History(q)
}
