package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/retention"
	"github.com/crew-dev/crew/internal/vocab"
)

type pruneOptions struct {
	*globalOptions
	olderThan time.Duration
	keep      int
	dryRun    bool
	json      bool
}

func newPruneCmd(g *globalOptions, s streams) *cobra.Command {
	o := &pruneOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "prune [--older-than D] [--keep N] [--dry-run]",
		Short: "Remove finished runs' records and logs",
		Long: `Remove the records and logs of finished runs that finished longer than
--older-than ago and are not among the --keep newest finished runs (with both,
a run goes only if both let it go). Without either, apply the retention
configured with crew init --retain N / --retain-for D, in full (each finishing
run applies it too, a few runs at a time). Active and waiting runs are never
touched, and it is safe to run while starts and recoveries run.

"The newest N" are precise: a run goes only once N finished runs were created
after it finished, so a long run that ends after N shorter ones is kept too.`,
		Example: `  crew prune --older-than 30d            # durations take days: 7d, 1d12h
  crew prune --keep 100                  # keep the newest 100 finished runs
  crew prune                             # apply crew.json's retain/retainFor
  crew prune --dry-run --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			markRan(cmd)
			ageSet, keepSet := cmd.Flags().Changed("older-than"), cmd.Flags().Changed("keep")
			return o.run(s, !ageSet && !keepSet, ageSet, keepSet)
		},
	}
	cmd.Flags().Var(duration.NewValue(&o.olderThan, 0), "older-than", "remove runs that finished longer ago than this")
	cmd.Flags().IntVar(&o.keep, "keep", 0, "always keep this many of the newest finished runs")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "report what would be removed, remove nothing")
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON (schema version 1)")
	return cmd
}

func (o *pruneOptions) run(s streams, configured, ageSet, keepSet bool) error {
	if o.olderThan < 0 || o.keep < 0 {
		return &usageError{fmt.Errorf("--older-than and --keep must not be negative")}
	}
	p := retention.Policy{KeepNewest: retention.NoCountRule, OlderThan: retention.NoAgeRule}
	if keepSet {
		p.KeepNewest = o.keep
	}
	if ageSet {
		p.OlderThan = o.olderThan
	}
	rep, err := o.prune(configured, dispatch.PruneOptions{Policy: p, DryRun: o.dryRun})
	if err != nil {
		return err
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(s.Err, "crew: warning: %s\n", termSafe(e))
	}
	if o.json {
		return writeJSON(s.Out, rep)
	}
	var bytes int64
	for _, r := range rep.Removed {
		bytes += r.Bytes
	}
	verb := "removed"
	if o.dryRun {
		verb = "would remove"
	}
	fmt.Fprintf(s.Out, "%s %d finished run(s) (%d bytes of records and logs); kept %d\n", verb, len(rep.Removed), bytes, rep.Kept)
	return nil
}

// prune applies the policy (or, configured, the store's own).
func (o *pruneOptions) prune(configured bool, opts dispatch.PruneOptions) (*vocab.PruneReport, error) {
	d, err := o.open(openOptions{})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if configured {
		return d.Admin().PruneConfigured(opts.DryRun)
	}
	return d.Admin().Prune(opts)
}
