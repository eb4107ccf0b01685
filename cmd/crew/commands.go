package main

import (
	"encoding/json"

	"github.com/crew-dev/crew/internal/cmddoc"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// commandsCmd is the hidden `crew __commands`: the command tree, as this
// build shows it in --help, printed as JSON. The generator of the command
// reference and the man pages (internal/tools/gendocs) reads it, so that
// neither it nor github.com/spf13/cobra/doc is linked into crew, and the
// reference shows the flags of the build it was made from (the local
// build hides the etcd store's).
const commandsCmd = "__commands"

func newCommandsCmd(s streams) *cobra.Command {
	return &cobra.Command{
		Use:    commandsCmd,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			markRan(cmd)
			root := cmd.Root()
			// What cobra adds only when a command runs: help and
			// completion commands, -h and -v.
			root.InitDefaultHelpCmd()
			root.InitDefaultCompletionCmd()
			root.InitDefaultVersionFlag()
			enc := json.NewEncoder(s.Out)
			enc.SetIndent("", "  ")
			return enc.Encode(describeCommand(root))
		},
	}
}

// describeCommand is c and the commands under it that --help lists.
func describeCommand(c *cobra.Command) cmddoc.Command {
	c.InitDefaultHelpFlag()
	d := cmddoc.Command{
		Use: c.Use, Short: c.Short, Long: c.Long, Example: c.Example, Runnable: c.Runnable(),
		Flags:           describeFlags(c.LocalNonPersistentFlags()),
		PersistentFlags: describeFlags(c.PersistentFlags()),
	}
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			d.Commands = append(d.Commands, describeCommand(sub))
		}
	}
	return d
}

// describeFlags is the flags of fs that --help shows, in its order.
func describeFlags(fs *pflag.FlagSet) []cmddoc.Flag {
	var out []cmddoc.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		out = append(out, cmddoc.Flag{
			Name: f.Name, Shorthand: f.Shorthand, Usage: f.Usage,
			Type: f.Value.Type(), Default: f.DefValue, NoOptDefault: f.NoOptDefVal,
		})
	})
	return out
}
