package main

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/vocab"
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
		Short: "Stop a run: its signal, SIGCONT, then SIGKILL after a grace period",
		Long: `Stop a run: send a signal (SIGTERM by default) to its processes, then SIGCONT,
and SIGKILL to what is left of its process group after --grace. The run is
recorded as stopped, with who stopped it (pid, user). Stopping a run that
already finished does nothing.

crew stop never signals a pid or process group because a file names it. A
supervised run (foreground or detached) is stopped by its supervisor, which
crew stop asks through the state root. An orphan (supervisor gone), or a run
whose supervisor does not answer within 2s, is stopped through the processes
the kernel shows holding the run's owner lock (Linux; elsewhere crew stop
refuses and says why). A waiting start is told to leave the queue.

Only the run's own user (or root) may stop it, in a state root shared with
a group too: anyone else is refused with exit 77, and nothing is signalled.
`,
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
	d, err := o.open(openOptions{})
	if err != nil {
		return err
	}
	defer d.Close()
	id, err := d.Resolve(arg)
	if err != nil {
		return err
	}
	task := quoteTask(d.TaskOf(id))
	if left, err := d.StopWaiter(id, sig); left || err != nil {
		if err == nil {
			fmt.Fprintf(s.Err, "crew: %s: told the waiting start %s to leave the queue\n", task, id)
		}
		return withTask(task, err)
	}
	before, _ := d.Run(id)
	rec, err := d.Stop(id, vocab.StopOptions{Signal: sig, Grace: o.grace})
	if err != nil {
		return withTask(task, err)
	}
	if before != nil && !before.State.Active() {
		fmt.Fprintf(s.Err, "crew: %s: run %s had already finished (%s)\n", quoteTask(rec.Task), id, termSafe(string(rec.State)))
	} else {
		fmt.Fprintf(s.Err, "crew: %s: run %s %s: %s\n", quoteTask(rec.Task), id, termSafe(string(rec.State)), termSafe(rec.Reason))
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

// withTask names the task in a refusal to stop another user's run, as crew
// stop's other lines do; other errors say what they say.
func withTask(task string, err error) error {
	var noPerm *vocab.NotPermittedError
	if errors.As(err, &noPerm) {
		return fmt.Errorf("%s: %w", task, err)
	}
	return err
}
