package main

import (
	"github.com/spf13/cobra"
)

// completeRuns completes RUN|TASK arguments from the state root: active
// runs' ids and tasks, waiting starts, and recent finished runs.
func completeRuns(g *globalOptions) func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		d, err := g.dispatcher()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		snap, err := d.Status("")
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		seen := map[string]bool{}
		var out []cobra.Completion
		add := func(s, desc string) {
			// A name that does not print (an older crew's) cannot be
			// typed and would reach the shell raw: not offered.
			if !printable(s) || !printable(desc) {
				return
			}
			if !seen[s] {
				seen[s] = true
				out = append(out, cobra.CompletionWithDesc(s, desc))
			}
		}
		for _, r := range snap.Active {
			add(r.Task, "task, "+string(r.State))
			add(string(r.RunID), r.Task+", "+string(r.State))
		}
		for _, q := range snap.Queue {
			add(q.Task, "task, waiting")
			add(string(q.RunID), q.Task+", waiting")
		}
		for _, r := range snap.Finished {
			add(r.Task, "task, "+string(r.State))
			add(string(r.RunID), r.Task+", "+string(r.State))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
