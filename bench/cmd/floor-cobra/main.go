// Command floor-cobra is the least a Go command-line supervisor with
// crew's command-line library can do for `start TASK -- COMMAND...`: build
// a cobra command tree, parse the arguments, start the command in a
// process group of its own and wait for it, and exit with its status. No
// state root, no records, no output capture. The harness builds it static
// (as crew is built) and times it beside crew and flock: what crew costs
// above it is crew's own work.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	code := 0
	root := &cobra.Command{Use: "floor-cobra", SilenceUsage: true, SilenceErrors: true}
	var wait bool
	var pool string
	start := &cobra.Command{
		Use:  "start TASK -- COMMAND [ARGS...]",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			argv := args[cmd.ArgsLenAtDash():]
			path, err := exec.LookPath(argv[0])
			if err != nil {
				return err
			}
			pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
				Env:   os.Environ(),
				Files: []uintptr{0, 1, 2},
				Sys:   &syscall.SysProcAttr{Setpgid: true},
			})
			if err != nil {
				return err
			}
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
				return err
			}
			code = ws.ExitStatus()
			return nil
		},
	}
	start.Flags().BoolVar(&wait, "wait", false, "wait for a slot")
	start.Flags().StringVar(&pool, "pool", "", "pool")
	root.AddCommand(start)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "floor-cobra:", err)
		os.Exit(1)
	}
	os.Exit(code)
}
