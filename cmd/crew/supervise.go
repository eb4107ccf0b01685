package main

import (
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/supervise"
)

// newSuperviseCmd is the hidden command a detached run's supervisor runs
// as; `crew start --detach` starts it with the run's locks as fds 3 and 4.
func newSuperviseCmd(g *globalOptions) *cobra.Command {
	var grace time.Duration
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
			d, err := g.dispatcher()
			if err != nil {
				return err
			}
			return supervise.RunDetached(d.Store, id, grace, sigs, d.RunFinished)
		},
	}
	cmd.Flags().Var(duration.NewValue(&grace, 10*time.Second), "grace", "")
	return cmd
}
