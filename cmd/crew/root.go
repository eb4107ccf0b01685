package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/vocab"
)

// streams are a command's standard streams; tests pass buffers.
type streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// globalOptions are the flags every command has.
type globalOptions struct {
	root string
	// store is --store: a shared etcd store instead of the state root.
	store string
	// etcd is how crew proves itself to an etcd store (--etcd-*).
	etcd etcdFlags
	// argv is crew's command line (without the program name), for the
	// checks flag parsing cannot make (a limit given as --wait 10m).
	argv []string
	// getenv is os.Getenv, replaceable in tests.
	getenv func(string) string
}

// stateRoot is the state root's path: --root, else CREW_ROOT, else
// ${XDG_STATE_HOME:-$HOME/.local/state}/crew.
func (g *globalOptions) stateRoot() (string, error) {
	root := g.root
	if root == "" {
		root = g.getenv("CREW_ROOT")
	}
	if root == "" {
		base := g.getenv("XDG_STATE_HOME")
		if !filepath.IsAbs(base) {
			base = "" // the XDG spec: relative paths are invalid and ignored
		}
		if base == "" {
			home := g.getenv("HOME")
			if home == "" {
				return "", errors.New("cannot find a state root: set --root, CREW_ROOT, XDG_STATE_HOME or HOME")
			}
			base = filepath.Join(home, ".local", "state")
		}
		root = filepath.Join(base, "crew")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("state root %s: %w", root, err)
	}
	return abs, nil
}

func newRootCmd(g *globalOptions, s streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "crew",
		Short: "Run commands under a machine-wide concurrency cap, with truthful records",
		Long: `crew runs a command only when one of maximumInProgress slots is free, across
every crew process on the machine, with no daemon. Every run is recorded in the
state root (--root, else $CREW_ROOT, else ${XDG_STATE_HOME:-$HOME/.local/state}/crew).
The reference is in docs/ of crew's source (every command, the state root, the
exit codes) and in the man pages (man crew, man crew-start, ...).`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.PersistentFlags().StringVar(&g.root, "root", "", "state root directory (default $CREW_ROOT, else ${XDG_STATE_HOME:-$HOME/.local/state}/crew)")
	root.PersistentFlags().StringVar(&g.store, "store", "", "a store shared across machines instead of the state root: etcd://HOST:PORT[,HOST:PORT...]/PREFIX (default $CREW_STORE; needs a crew built with -tags etcd)")
	g.etcd.register(root.PersistentFlags())
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{flagError(unknownFlag(cmd, err))} })
	root.Version = versionString()
	root.SetVersionTemplate("crew version {{.Version}}\n")
	root.AddCommand(newInitCmd(g, s), newStartCmd(g, s), newStatusCmd(g, s), newHistoryCmd(g, s), newRecoverCmd(g, s),
		newWaitCmd(g, s), newLogsCmd(g, s), newStopCmd(g, s), newPruneCmd(g, s), newSuperviseCmd(g), newBackgroundWaitCmd(g), newCommandsCmd(s))
	root.SetUsageFunc(usageFunc(s.Out))
	hideUnsupported(root)
	return root
}

// run executes crew with args and returns the process exit code.
func run(args []string, s streams) int {
	code, _ := execute(args, s)
	return code
}

// execute executes crew with args and returns the process exit code, and
// for a run ended by SIGINT or SIGQUIT what crew is to die by instead
// (main does).
func execute(args []string, s streams) (int, *interruptedError) {
	if err := checkOpenFiles(args); err != nil {
		fmt.Fprintf(s.Err, "crew: %s\n", termError(err))
		return exitCodeFor(err), nil
	}
	g := &globalOptions{getenv: os.Getenv, argv: args}
	root := newRootCmd(g, s)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK, nil
	}
	if cmd == nil || !cmdRan(cmd) {
		// cobra's own errors: unknown command, bad arguments.
		err = &usageError{&cobraError{err}}
	}
	var unsafe *dispatch.UnsafeRootError
	if errors.As(err, &unsafe) {
		err = unsafe // about the whole state root, whatever the command was doing
	}
	code := exitCodeFor(err)
	if !silent(err) {
		// Errors name files and records of the state root: made safe
		// for the terminal.
		fmt.Fprintf(s.Err, "crew: %s\n", termError(err))
		if hint := resourceHint(err); hint != "" {
			fmt.Fprintf(s.Err, "crew: %s\n", hint)
		}
	}
	var onStore *vocab.RefusedOnStoreError
	if code == exitUsage && cmd != nil && !errors.As(err, &onStore) { // the command line was right, the store cannot
		fmt.Fprintf(s.Err, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	var intr *interruptedError
	if errors.As(err, &intr) {
		return code, intr
	}
	return code, nil
}

// ranKey marks, in a command's annotations, that its RunE started: errors
// from before that point are usage errors.
const ranKey = "crew/ran"

func markRan(cmd *cobra.Command) {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[ranKey] = "yes"
}

func cmdRan(cmd *cobra.Command) bool { return cmd.Annotations[ranKey] == "yes" }
