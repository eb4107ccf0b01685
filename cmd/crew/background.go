package main

import (
	"errors"
	"os"
	"os/signal"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// newBackgroundWaitCmd is the hidden command a background waiter runs as:
// `crew start --detach --wait` that is not admitted at once starts it
// with its place in line from fd 3 on (then the request and the handover
// pipes), and returns.
func newBackgroundWaitCmd(g *globalOptions) *cobra.Command {
	var adopt []string
	var files int
	refusedExit := newRefusedExit()
	cmd := &cobra.Command{
		Use:    dispatch.BackgroundCommand + " RUN-ID",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			markRan(cmd)
			// Take the inherited descriptors first: nothing else may
			// leak them to a process of its own.
			b := dispatch.Inherit(record.RunID(args[0]), adopt, files, func(err error) int {
				return startExitCode(err, &refusedExit)
			})
			if _, err := record.ParseRunID(args[0]); err != nil {
				b.Refuse(err)
				return &usageError{err}
			}
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, stopSignals...)
			surviveBrokenPipes()
			d, err := g.open(openOptions{})
			if err != nil {
				b.Refuse(err)
				return err
			}
			defer d.Close()
			return b.Wait(d, sigs)
		},
	}
	cmd.Flags().StringArrayVar(&adopt, "adopt", nil, "")
	cmd.Flags().IntVar(&files, "files", 0, "")
	cmd.Flags().Var(&refusedExit, "refused-exit", "")
	return cmd
}

// startExitCode is the exit code crew start would have exited with for
// err in the foreground, given its --refused-exit, for the record of a
// background waiter's start that never ran.
func startExitCode(err error, refusedExit *refusedExit) int {
	var refused *vocab.RefusedError
	if errors.As(err, &refused) {
		err = &chosenRefusal{err: err, code: refusedExit.codeFor(refused)}
	}
	return exitCodeFor(err)
}
