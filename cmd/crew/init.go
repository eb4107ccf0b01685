package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/runstore"
)

type initOptions struct {
	*globalOptions
	max    int
	maxSet bool
}

func newInitCmd(g *globalOptions, s streams) *cobra.Command {
	o := &initOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "init [--max N]",
		Short: "Create the state root and write its config (crew.json)",
		Long: fmt.Sprintf(`Create the state root and write its versioned config, crew.json, atomically.

Running it again is safe: without --max it keeps the current cap; with --max it
changes the cap, also while runs are active (admissions read the config inside
the admission lock). Without any config the cap is %d.`, runstore.DefaultMaximumInProgress),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			markRan(cmd)
			o.maxSet = cmd.Flags().Changed("max")
			return o.run(s)
		},
	}
	cmd.Flags().IntVar(&o.max, "max", runstore.DefaultMaximumInProgress, "maximumInProgress: how many runs may be active at once")
	return cmd
}

func (o *initOptions) run(s streams) error {
	if o.maxSet && o.max < 1 {
		return &usageError{fmt.Errorf("--max must be at least 1, not %d", o.max)}
	}
	root, err := o.stateRoot()
	if err != nil {
		return err
	}
	l := runstore.Layout{Root: root}
	if err := l.Ensure(); err != nil {
		return err
	}
	cfg, exists, err := runstore.LoadConfig(l)
	if err != nil && !o.maxSet {
		// Without --max there is nothing to put in its place.
		return err
	}
	old := cfg.MaximumInProgress
	if o.maxSet {
		cfg = runstore.Config{Version: runstore.ConfigVersion, MaximumInProgress: o.max}
	}
	if !exists || o.maxSet {
		if err := runstore.SaveConfig(l, cfg); err != nil {
			return err
		}
	}
	switch {
	case exists && err == nil && old != cfg.MaximumInProgress:
		fmt.Fprintf(s.Err, "crew: %s: maximumInProgress %d (was %d)\n", l.ConfigPath(), cfg.MaximumInProgress, old)
	default:
		fmt.Fprintf(s.Err, "crew: %s: maximumInProgress %d\n", l.ConfigPath(), cfg.MaximumInProgress)
	}
	return nil
}
