package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/crew-dev/crew/internal/vocab"
	"github.com/spf13/cobra"
)

// completeRuns completes RUN|TASK arguments from the state root: active
// runs' ids and tasks, waiting starts, and recent finished runs.
func completeRuns(g *globalOptions) func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		d, err := g.open(openOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer d.Close()
		snap, err := d.Status(vocab.StatusQuery{})
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

// completeStart completes crew start's words: before --, task names
// from the state root; after it, the command (executables on $PATH whose
// names begin with what was typed) and then its arguments, which the
// shell completes as it would for the command itself: file names
// (cobra's ShellCompDirectiveDefault).
func completeStart(g *globalOptions) func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	tasks := completeRuns(g)
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		// Where -- is, from the words typed (cobra's completion parses the
		// flags twice, the first time with a -- of its own, so the flag
		// set's ArgsLenAtDash cannot tell).
		afterDash := -1
		if n := len(g.argv); n > 0 {
			for _, w := range g.argv[:n-1] {
				if afterDash >= 0 {
					afterDash++
				}
				if w == "--" && afterDash < 0 {
					afterDash = 0
				}
			}
		}
		if afterDash < 0 {
			all, dir := tasks(cmd, args, toComplete)
			var out []cobra.Completion
			for _, c := range all {
				if _, desc, _ := strings.Cut(c, "\t"); strings.HasPrefix(desc, "task, ") {
					out = append(out, c) // task names, not run ids
				}
			}
			return out, dir
		}
		if afterDash == 0 && toComplete != "" && !strings.Contains(toComplete, "/") {
			return executables(g.getenv("PATH"), toComplete), cobra.ShellCompDirectiveDefault
		}
		return nil, cobra.ShellCompDirectiveDefault
	}
}

// executables lists the executable files on path whose names begin with
// prefix, each once.
func executables(path, prefix string) []cobra.Completion {
	seen := map[string]bool{}
	var out []cobra.Completion
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			if seen[name] || !strings.HasPrefix(name, prefix) || !printable(name) {
				continue
			}
			if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	return out
}
