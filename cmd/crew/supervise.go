package main

import (
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/supervise"
)

// newSuperviseCmd is the hidden command a detached run's supervisor runs
// as; `crew start --detach` starts it with the run's locks as fds 3 and 4.
func newSuperviseCmd(g *globalOptions) *cobra.Command {
	var grace time.Duration
	var adopt []string
	var files int
	cmd := &cobra.Command{
		Use:    supervise.Command + " RUN-ID",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			markRan(cmd)
			id, err := record.ParseRunID(args[0])
			if err != nil {
				return &usageError{err}
			}
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, stopSignals...)
			surviveBrokenPipes()
			d, err := g.open(openOptions{})
			if err != nil {
				return err
			}
			defer d.Close()
			adopter, ok := d.Store.(backend.Adopter)
			if !ok {
				return fmt.Errorf("%s cannot hand a run to a detached supervisor", d.Store.Where())
			}
			a := supervise.Adoption{Store: adopter, Runs: d.Store.Runs(), Logs: d.Logs, ID: id, Values: adopt, Files: files}
			return supervise.RunDetached(a, grace, sigs, d.RunFinished)
		},
	}
	cmd.Flags().Var(duration.NewValue(&grace, 10*time.Second), "grace", "")
	cmd.Flags().StringArrayVar(&adopt, "adopt", nil, "")
	cmd.Flags().IntVar(&files, "files", 0, "")
	return cmd
}
