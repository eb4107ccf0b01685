// Command floor-durable is floor-cobra plus the least crew's invariants
// cannot do without (issue 25's durable floor): under an exclusive flock
// on the root's admission lock, create one file for the run (held under
// its own exclusive flock, the owner lock), write the reservation into it
// and make it durable (fsync the file, fsync the directory) before the
// admission lock is released; then start the command in a process group
// of its own, wait for it, write the outcome into the same file and make
// it durable (a third fsync). One file created per run, none freed, three
// fsyncs. The harness builds it static, as crew is built, and times it
// beside crew on the same filesystem:
//
//	floor-durable --root DIR start TASK -- COMMAND [ARGS...]
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

func main() {
	code := 0
	var root string
	cmdRoot := &cobra.Command{Use: "floor-durable", SilenceUsage: true, SilenceErrors: true}
	cmdRoot.PersistentFlags().StringVar(&root, "root", "", "directory of the run files (must exist)")
	var wait bool
	var pool string
	start := &cobra.Command{
		Use:  "start TASK -- COMMAND [ARGS...]",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if root == "" {
				return fmt.Errorf("--root is required")
			}
			var err error
			code, err = run(root, args[0], args[cmd.ArgsLenAtDash():])
			return err
		},
	}
	start.Flags().BoolVar(&wait, "wait", false, "wait for a slot")
	start.Flags().StringVar(&pool, "pool", "", "pool")
	cmdRoot.AddCommand(start)
	if err := cmdRoot.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "floor-durable:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// run reserves (durably), runs argv, and records the outcome (durably).
func run(root, task string, argv []string) (int, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return 0, err
	}
	run, err := reserve(root, task)
	if err != nil {
		return 0, err
	}
	defer run.Close()
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, err
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return 0, err
	}
	// The outcome goes into the block the reservation already allocated.
	outcome := fmt.Sprintf(`{"state":"finished","exitCode":%d,"finishedAt":%q}`+"\n", ws.ExitStatus(), time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := run.WriteAt([]byte(outcome), 1024); err != nil {
		return 0, fmt.Errorf("write outcome: %w", err)
	}
	if err := run.Sync(); err != nil { // fsync 3
		return 0, fmt.Errorf("fsync outcome: %w", err)
	}
	return ws.ExitStatus(), nil
}

// reserve takes the admission lock, creates the run's file under it (held
// with an exclusive flock for the run's life), and makes the reservation
// durable before the admission lock is released.
func reserve(root, task string) (*os.File, error) {
	adm, err := os.OpenFile(filepath.Join(root, "admission.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer adm.Close() // releases the admission lock
	if err := unix.Flock(int(adm.Fd()), unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("admission lock: %w", err)
	}
	name := "r-" + strconv.FormatInt(time.Now().UnixNano(), 10) + "-" + strconv.Itoa(os.Getpid())
	run, err := os.OpenFile(filepath.Join(root, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(run.Fd()), unix.LOCK_EX); err != nil {
		run.Close()
		return nil, fmt.Errorf("owner lock: %w", err)
	}
	reservation := fmt.Sprintf(`{"runId":%q,"task":%q,"state":"running","pid":%d,"createdAt":%q}`+"\n", name, task, os.Getpid(), time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := run.Write([]byte(reservation)); err != nil {
		run.Close()
		return nil, fmt.Errorf("write reservation: %w", err)
	}
	if err := run.Sync(); err != nil { // fsync 1
		run.Close()
		return nil, fmt.Errorf("fsync reservation: %w", err)
	}
	if err := syncDir(root); err != nil { // fsync 2
		run.Close()
		return nil, err
	}
	return run, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
