package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/vocab"
)

type recoverOptions struct {
	*globalOptions
	dryRun  bool
	json    bool
	timeout time.Duration
}

func newRecoverCmd(g *globalOptions, s streams) *cobra.Command {
	o := &recoverOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "recover [--dry-run] [--json] [--timeout D]",
		Short: "Finalize what crashes left behind",
		Long: `Bring every record in the active set to the truth and sweep what crashes left:

  finalized    the run's owner is gone: recorded as interrupted, with what is known
  orphaned     the supervisor is gone but the command still runs: left running
  alive        someone still works on it: skipped
  quarantined  an unreadable record with no living owner: moved to quarantine/ with a note
  cleaned      a leftover of a crash (lock file with no run, temporary file) removed
  indexed      the index of finished runs built anew, or completed with runs it lacked
  failed       could not be handled, or not reached within --timeout

Safe to run at any time, from cron too: concurrently with itself and with crew
start, it never finalizes a run twice and never touches a living one. A second
pass right after the first finds nothing to do. Exit 0 when everything
converged, 1 when an item failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			markRan(cmd)
			return o.run(s)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.dryRun, "dry-run", false, "report what would be done, change nothing")
	f.BoolVar(&o.json, "json", false, "print JSON (schema version 1, see docs/usage.md)")
	f.Var(duration.NewValue(&o.timeout, time.Minute), "timeout", "bound on the whole pass")
	return cmd
}

func (o *recoverOptions) run(s streams) error {
	if o.timeout <= 0 {
		return &usageError{fmt.Errorf("--timeout must be positive, not %s", o.timeout)}
	}
	report, err := o.recover()
	if err != nil {
		return err
	}
	if o.json {
		if err := writeJSON(s.Out, report); err != nil {
			return err
		}
	} else {
		printRecover(s.Out, report)
	}
	if n := report.Count(vocab.FailedItem); n > 0 {
		return &itemsFailedError{n}
	}
	return nil
}

func printRecover(w io.Writer, r *vocab.RecoverReport) {
	changed := 0
	for _, o := range []vocab.RecoverOutcome{vocab.Finalized, vocab.Quarantined, vocab.Cleaned, vocab.Indexed, vocab.FailedItem} {
		changed += r.Count(o)
	}
	if len(r.Items) > 0 {
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "OUTCOME\tRUN ID\tTASK\tREASON")
		for _, it := range r.Items {
			id := string(it.RunID)
			if id == "" {
				id = it.Path
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.Outcome, termSafe(id), quoteTask(it.Task), termSafe(it.Reason))
		}
		tw.Flush()
	}
	prefix := ""
	if r.DryRun {
		prefix = "dry run: "
	}
	if changed == 0 {
		fmt.Fprintf(w, "%snothing to do (%d alive, %d orphaned)\n", prefix, r.Count(vocab.Alive), r.Count(vocab.Orphaned))
		return
	}
	fmt.Fprintf(w, "%sfinalized %d, orphaned %d, alive %d, quarantined %d, cleaned %d, indexed %d, failed %d\n", prefix,
		r.Count(vocab.Finalized), r.Count(vocab.Orphaned), r.Count(vocab.Alive),
		r.Count(vocab.Quarantined), r.Count(vocab.Cleaned), r.Count(vocab.Indexed), r.Count(vocab.FailedItem))
}

// itemsFailedError is a recovery pass in which some items failed: exit 1.
type itemsFailedError struct{ n int }

func (e *itemsFailedError) Error() string { return fmt.Sprintf("recover: %d item(s) failed", e.n) }

// recover runs the pass on the store.
func (o *recoverOptions) recover() (*vocab.RecoverReport, error) {
	d, err := o.open(openOptions{})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Admin().Recover(dispatch.RecoverOptions{DryRun: o.dryRun, Timeout: o.timeout})
}
