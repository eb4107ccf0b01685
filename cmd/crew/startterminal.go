package main

import "github.com/spf13/cobra"

// startTerminal is crew start's --no-pty.
type startTerminal struct {
	noPTY bool
}

func (x *startTerminal) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&x.noPTY, "no-pty", false, "on a terminal, give the command pipes as elsewhere instead of a pseudo-terminal of its own")
}
