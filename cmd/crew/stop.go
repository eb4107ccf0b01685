package main

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/duration"
)

type stopOptions struct {
	*globalOptions
	grace  time.Duration
	signal string
	json   bool
}

func newStopCmd(g *globalOptions, s streams) *cobra.Command {
	o := &stopOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "stop RUN|TASK [--grace D] [--signal SIG]",
		Short: "Stop a run: signal its process group, then SIGKILL after a grace period",
		Long: `Send a signal (SIGTERM by default) to the run's process group, wait up to
--grace for the run to end, then send SIGKILL. The run is recorded as stopped,
with who stopped it (pid, user). This works for foreground and detached runs,
and for orphans whose supervisor is already gone (then crew stop records the
run itself once the command's last process has exited). A waiting start is
told to leave the queue. Stopping a run that already finished does nothing.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRuns(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			markRan(cmd)
			return o.run(args[0], s)
		},
	}
	cmd.Flags().Var(duration.NewValue(&o.grace, 10*time.Second), "grace", "time between the signal and SIGKILL")
	cmd.Flags().StringVar(&o.signal, "signal", "SIGTERM", "signal to send first (name such as TERM, INT, HUP, or number)")
	cmd.Flags().BoolVar(&o.json, "json", false, `print {"version": 1, "run": RUN} with the run's final record`)
	return cmd
}

func parseSignal(s string) (syscall.Signal, error) {
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}

func (o *stopOptions) run(arg string, s streams) error {
	sig, err := parseSignal(o.signal)
	if err != nil {
		return &usageError{err}
	}
	if o.grace < 0 {
		return &usageError{fmt.Errorf("--grace must not be negative, not %s", o.grace)}
	}
	d, err := o.dispatcher()
	if err != nil {
		return err
	}
	id, err := d.Resolve(arg)
	if err != nil {
		return err
	}
	if left, err := d.StopWaiter(id, sig); left || err != nil {
		if err == nil {
			fmt.Fprintf(s.Err, "crew: told the waiting start %s to leave the queue\n", id)
		}
		return err
	}
	before, _ := d.Run(id)
	rec, err := d.Stop(id, dispatch.StopOptions{Signal: sig, Grace: o.grace})
	if err != nil {
		return err
	}
	if before != nil && !before.State.Active() {
		fmt.Fprintf(s.Err, "crew: run %s had already finished (%s)\n", id, rec.State)
	} else {
		fmt.Fprintf(s.Err, "crew: run %s %s: %s\n", id, rec.State, rec.Reason)
	}
	if o.json {
		v, err := d.Run(id)
		if err != nil {
			return err
		}
		return writeJSON(s.Out, map[string]any{"version": 1, "run": v})
	}
	return nil
}
