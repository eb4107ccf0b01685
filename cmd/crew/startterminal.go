package main

import "github.com/spf13/cobra"

// startTerminal is crew start's --no-pty.
type startTerminal struct {
	noPTY bool
}

func (x *startTerminal) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&x.noPTY, "no-pty", false, "on a terminal, give the command pipes as elsewhere instead of a pseudo-terminal of its own")
}

// terminalHelp is crew start --help's word on terminals.
const terminalHelp = `On an interactive terminal (stdin, stdout and stderr all terminals, crew in the
foreground) the command gets a pseudo-terminal of its own, so it sees a terminal
(colours, progress bars) while its output still goes to the log; keystrokes,
Ctrl-C, Ctrl-Z and window-size changes reach it as on crew's terminal. With
--no-pty, --tag, --detach, or any stream redirected, it gets pipes.`
