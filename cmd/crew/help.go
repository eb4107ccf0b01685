package main

import (
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/spf13/cobra"
)

// Help is a short summary, examples and the flags; the reference is in
// docs/. Every line fits helpWidth: flag descriptions are wrapped
// (cobra prints each on one line, however long), and the summaries and
// examples are written to fit.

// helpWidth is the most columns a line of help takes: the terminal's
// width if it is narrower, else one short of 100.
const helpWidth = 99

// helpWidthFor is the width help is wrapped to on w.
func helpWidthFor(w io.Writer) int {
	if cols := terminalWidth(w); cols > 0 && cols < helpWidth {
		return max(cols, 60) // narrower than that, wrapping makes it worse
	}
	return helpWidth
}

// usageFunc is cobra's usage text (crew's commands have no aliases or
// groups), with flag descriptions wrapped to fit out, where help goes.
func usageFunc(out io.Writer) func(*cobra.Command) error {
	return func(c *cobra.Command) error {
		width := helpWidthFor(out)
		var b strings.Builder
		b.WriteString("Usage:")
		if c.Runnable() {
			fmt.Fprintf(&b, "\n  %s", c.UseLine())
		}
		if c.HasAvailableSubCommands() {
			fmt.Fprintf(&b, "\n  %s [command]", c.CommandPath())
		}
		if c.HasExample() {
			fmt.Fprintf(&b, "\n\nExamples:\n%s", c.Example)
		}
		if c.HasAvailableSubCommands() {
			b.WriteString("\n\nAvailable Commands:")
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() || sub.Name() == "help" {
					fmt.Fprintf(&b, "\n  %-*s %s", sub.NamePadding(), sub.Name(), sub.Short)
				}
			}
		}
		if c.HasAvailableLocalFlags() {
			fmt.Fprintf(&b, "\n\nFlags:\n%s", trimRightSpace(c.LocalFlags().FlagUsagesWrapped(width)))
		}
		if c.HasAvailableInheritedFlags() {
			fmt.Fprintf(&b, "\n\nGlobal Flags:\n%s", trimRightSpace(c.InheritedFlags().FlagUsagesWrapped(width)))
		}
		if c.HasAvailableSubCommands() {
			fmt.Fprintf(&b, "\n\nUse \"%s [command] --help\" for more information about a command.", c.CommandPath())
		}
		b.WriteString("\n")
		_, err := io.WriteString(c.OutOrStderr(), b.String())
		return err
	}
}

func trimRightSpace(s string) string { return strings.TrimRightFunc(s, unicode.IsSpace) }

// hideUnsupported hides the flags this build refuses: --store, --etcd-*
// and --lease-ttl without the etcd backend. They still parse, so that their
// error says how to get a crew that has it.
func hideUnsupported(root *cobra.Command) {
	if openEtcd != nil {
		return
	}
	_ = root.PersistentFlags().MarkHidden("store")
	for _, name := range etcdFlagNames {
		_ = root.PersistentFlags().MarkHidden(name)
	}
	for _, c := range root.Commands() {
		if c.Flags().Lookup("lease-ttl") != nil {
			_ = c.Flags().MarkHidden("lease-ttl")
		}
	}
}
