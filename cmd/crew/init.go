package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

type initOptions struct {
	*globalOptions
	pools       []string
	max         int
	maxSet      bool
	lockTimeout time.Duration
	group       string // --group: share the root with this group
	noGroup     bool   // --no-group: make a shared root private again
	initExtras
}

func newInitCmd(g *globalOptions, s streams) *cobra.Command {
	o := &initOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "init [--max N] [--pool NAME=N]... [--retain N] [--retain-for D] [--log-max SIZE]",
		Short: "Create the state root and write its config (crew.json)",
		Long: fmt.Sprintf(`Create the state root and write its versioned config, crew.json, atomically.
Running it again is safe: it changes only what its flags give, also while runs
are active. Without any config the cap is %d. --group NAME shares the state root
with a group (directories 2770, files 0660); --no-group makes it private again.
--retain N and --retain-for D bound the finished runs kept, --log-max each log.

docs/usage.md's "crew init" and "Retention and log caps" sections are the reference.`, record.DefaultMaximumInProgress),
		Example: `  crew init --max 4
  crew init --retain 1000 --log-max 1MiB     # a cron job's state root stays bounded
  crew init --retain-for 30d --retain 100    # a month, and at least the last 100 runs
  crew init --retain 0                       # keep any number again
  crew init --group ci                       # share the state root with group ci`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			markRan(cmd)
			o.maxSet = cmd.Flags().Changed("max")
			return o.run(cmd, s)
		},
	}
	cmd.Flags().IntVar(&o.max, "max", record.DefaultMaximumInProgress, "maximumInProgress: how many runs may be active at once")
	cmd.Flags().StringArrayVar(&o.pools, "pool", nil, "NAME=N: give pool NAME a cap of N (inside the global cap); N=0 removes it; repeatable")
	cmd.Flags().Var(duration.NewValue(&o.lockTimeout, 30*time.Second), "lock-timeout", "how long to wait for the admission lock")
	cmd.Flags().StringVar(&o.group, "group", "", "share the state root with this group: directories 2770, files 0660")
	cmd.Flags().BoolVar(&o.noGroup, "no-group", false, "make a shared state root private again")
	o.initExtras.flags(cmd)
	return cmd
}

func (o *initOptions) run(cmd *cobra.Command, s streams) error {
	if o.maxSet && o.max < 1 {
		return &usageError{fmt.Errorf("--max must be at least 1, not %d", o.max)}
	}
	var pools []vocab.PoolChange
	for _, spec := range o.pools {
		name, n, ok := strings.Cut(spec, "=")
		max, err := strconv.Atoi(n)
		if !ok || err != nil || name == "" {
			return &usageError{fmt.Errorf("--pool wants NAME=N (such as deploy=1), not %q", spec)}
		}
		pools = append(pools, vocab.PoolChange{Name: name, Max: max})
	}
	if o.group != "" && o.noGroup {
		return &usageError{fmt.Errorf("--group and --no-group do not go together")}
	}
	d, err := o.open(openOptions{})
	if err != nil {
		return err
	}
	defer d.Close()
	changes, err := o.initExtras.changes(cmd)
	if err != nil {
		return err
	}
	if o.group != "" {
		if _, err := d.Admin().PrepareShare(o.group); err != nil {
			return err
		}
	}
	res, err := d.Admin().Init(o.max, o.maxSet, pools, o.lockTimeout, changes...)
	if err != nil {
		return err
	}
	o.report(res, s)
	return o.share(d, s)
}

// report says what crew init wrote.
func (o *initOptions) report(res *vocab.InitResult, s streams) {
	if res.MovedAside != "" {
		fmt.Fprintf(s.Err, "crew: %s was unusable (%s); moved it to %s. Nothing in it was carried over: "+
			"compare the two, and set its pools again with `crew init --pool NAME=N`\n", res.Path, res.Broken, res.MovedAside)
	}
	if res.Existed && res.Old != res.New {
		fmt.Fprintf(s.Err, "crew: %s: maximumInProgress %d (was %d)\n", termSafe(res.Path), res.New, res.Old)
	} else {
		fmt.Fprintf(s.Err, "crew: %s: maximumInProgress %d\n", termSafe(res.Path), res.New)
	}
	for _, name := range slices.Sorted(maps.Keys(res.Pools)) {
		fmt.Fprintf(s.Err, "crew: pool %s: maximumInProgress %d\n", quoteTask(name), res.Pools[name])
		if res.Pools[name] > res.New {
			fmt.Fprintf(s.Err, "crew: warning: pool %s's cap %d is above the global maximumInProgress %d: no more than %d of its runs can be active at once\n",
				quoteTask(name), res.Pools[name], res.New, res.New)
		}
	}
	printLimits(s.Err, res.Config)
}

// share applies --group or --no-group after the config is written.
func (o *initOptions) share(d *dispatch.Dispatcher, s streams) error {
	var res *vocab.ShareResult
	var err error
	switch {
	case o.group != "":
		res, err = d.Admin().Share(o.group, o.lockTimeout)
	case o.noGroup:
		res, err = d.Admin().Unshare(o.lockTimeout)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	for _, skipped := range res.Skipped {
		fmt.Fprintf(s.Err, "crew: warning: left alone: %s\n", termSafe(skipped))
	}
	if res.Group != "" {
		fmt.Fprintf(s.Err, "crew: %s: shared with group %s (directories 2770, files 0660; %d changed)\n", termSafe(res.Root), res.Group, res.Changed)
	} else {
		fmt.Fprintf(s.Err, "crew: %s: private (directories 0700, files 0600; %d changed)\n", termSafe(res.Root), res.Changed)
	}
	return nil
}
