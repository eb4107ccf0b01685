package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

type startOptions struct {
	*globalOptions
	task        string // --task, for names that begin with -
	wait        waitFlag
	pool        string
	detach      bool
	json        bool
	force       bool
	lockTimeout time.Duration
	grace       time.Duration
	startExtras
	startTerminal
	refusedExit refusedExit   // --refused-exit
	quiet       quietFlag     // --quiet[=REASON]
	leaseTTL    time.Duration // --lease-ttl (etcd store)
	labels      labelsFlag    // --label KEY=VALUE, repeatable
}

func newStartCmd(g *globalOptions, s streams) *cobra.Command {
	o := &startOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "start [flags] TASK -- COMMAND [ARGS...]",
		Short: "Run COMMAND as a run of TASK when a slot is free",
		Long: `Run COMMAND as a run of TASK when one of the maximumInProgress slots is free
and TASK has no active run; otherwise refuse at once, or with --wait wait in line.
Its output also goes to the run's log; SIGINT, SIGTERM, SIGHUP and SIGQUIT go to
its process group, and a run SIGINT or SIGQUIT ended (Ctrl-C) ends crew by that
signal, so that the script that ran crew stops too. See docs/start.md (man crew-start).

` + exitCodeHelp,
		Example: `  crew start build -- make -j2
  crew start --wait build -- make                # wait in line, then run
  crew start --wait=10m nightly -- ./backup.sh   # give up after 10 minutes: exit 75
  crew start --pool deploy deploy:prod -- ./deploy.sh
  crew start --task=-nightly -- ./backup.sh      # a task name that begins with -
  crew start --tag lint -- make lint             # each output line starts "lint<TAB>"
  crew start --timeout 30m --retries 2 e2e -- make e2e
  crew start --label pipeline=$CI_PIPELINE_ID unit -- make test
  crew start --refused-exit 76=0 --quiet=76 sync -- ./sync.sh  # cron: fine if still running`,
		ValidArgsFunction: completeStart(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			markRan(cmd)
			return o.run(cmd, args, s)
		},
	}
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{flagError(startFlagHint(cmd, err, g.argv))}
	})
	f := cmd.Flags()
	f.StringVar(&o.task, "task", "", "the task's name, instead of TASK before --; for names that begin with - (--task=-x)")
	f.Var(&o.wait, "wait", "wait in line for a slot instead of refusing; --wait=D (with \"=\") gives up after D (exit 75, or 76 if it was the task); --wait=0 does not wait")
	f.Lookup("wait").NoOptDefVal = "forever"
	f.StringVar(&o.pool, "pool", "", "also take a slot in this configured pool")
	f.BoolVar(&o.detach, "detach", false, "run in the background: print the run id once the command runs, output to the run's log only; with --wait, once in line (it waits in the background)")
	f.BoolVar(&o.json, "json", false, "with --detach (only), print {\"version\":1,\"runId\":...} instead of the bare run id (with --wait, also \"queued\" and \"position\" in line)")
	f.BoolVar(&o.force, "force", false, "admit even if all slots are busy (recorded in the run)")
	f.Var(duration.NewValue(&o.lockTimeout, 30*time.Second), "lock-timeout", "how long to wait for the admission lock")
	f.Var(duration.NewValue(&o.grace, 10*time.Second), "grace", "time between forwarding a stop signal and SIGKILL")
	o.startExtras.flags(cmd)
	o.startTerminal.flags(cmd)
	o.refusedExit = newRefusedExit()
	f.Var(&o.refusedExit, "refused-exit", "exit N (0-255) instead of 75 or 76 when not admitted (also when --wait=D gives up); 76=N or 75=N: for that reason only")
	f.Lookup("refused-exit").DefValue = "75 or 76"
	f.Var(duration.NewValue(&o.leaseTTL, defaultLeaseTTL), "lease-ttl", "etcd store: the run's lease TTL, how long its slot outlives a supervisor that stopped renewing it (default $CREW_LEASE_TTL, else 10s; at least 2s)")
	f.Var(&o.labels, "label", "label the run (repeatable), for crew status, history and wait --label to select it by, as in --label pipeline=$CI_PIPELINE_ID")
	f.Var(&o.quiet, "quiet", "say nothing when not admitted, and no waiting or admitted lines; --quiet=76 (or 75): only about that refusal")
	f.Lookup("quiet").NoOptDefVal = "true"
	f.Lookup("quiet").DefValue = "false"
	return cmd
}

func (o *startOptions) run(cmd *cobra.Command, args []string, s streams) error {
	args, dash, err := o.checkArgs(cmd, args)
	if err != nil {
		return err
	}
	logMax, err := o.startExtras.check(cmd, o.detach)
	if err != nil {
		return err
	}
	// Catch stop signals before admission, so none is lost in between.
	sigs := make(chan os.Signal, 4)
	// No signal.Stop: crew exits when start returns, and Stop waits for
	// the runtime's signal loop to go idle (a goroutine handoff, 0.3 ms of
	// a 5 ms start); a signal that arrives after the run ended is dropped
	// instead of turning the command's exit code into crew's own death.
	signal.Notify(sigs, stopSignals...)
	relay := relaySignals(sigs)
	surviveBrokenPipes()

	ttl, err := o.leaseTTLFor(cmd)
	if err != nil {
		return err
	}
	d, err := o.open(openOptions{leaseTTL: ttl})
	if err != nil {
		return err
	}
	defer d.Close()
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("find the working directory: %w", err)
	}
	view := newWaitView(s.Err, args[0], o.quiet.all)
	defer view.close()
	stdin := s.In
	if o.detach {
		stdin = nil
	}
	var queued *vocab.WaitProgress // a detached start that waits in the background
	runID, err := d.Start(vocab.StartRequest{
		AdmitRequest: vocab.AdmitRequest{
			Task:        args[0],
			Command:     args[dash:],
			Dir:         wd,
			Pool:        o.pool,
			Force:       o.force,
			LockTimeout: o.lockTimeout,
			Wait:        o.wait.set,
			WaitTimeout: o.wait.timeout,
			OnWait:      view.update,
			LogMax:      logMax,
			Timeout:     o.timeout,
			Retries:     o.retries,
			RetryDelay:  o.retryDelay,
			Parent:      parentRun(),
			Labels:      o.labels.labels,
		},
		Tag:    o.tag,
		NoPTY:  o.noPTY,
		Grace:  o.grace,
		Stdin:  stdin,
		Detach: o.detach,
		OnQueued: func(p vocab.WaitProgress) {
			queued = &p
		},
		WaiterArgs: o.waiterArgs(),
		Stdout:     s.Out,
		Stderr:     s.Err,
		Env:        os.Environ(),
		Signals:    relay.out,
		Warn:       func(err error) { fmt.Fprintf(s.Err, "crew: %s: warning: %s\n", quoteTask(args[0]), termError(err)) },
		Note:       view.note,
	})
	return o.ended(d, s, args[0], detached{runID, queued}, err, relay)
}

// waiterArgs are the flags a background waiter (--detach --wait) is
// started with: those that decide its exit code.
func (o *startOptions) waiterArgs() []string {
	if !o.refusedExit.set {
		return nil
	}
	return []string{"--refused-exit", o.refusedExit.String()}
}

// detached is what a detached start prints: its run's id, and where it
// stands in line if it waits in the background (queued).
type detached struct {
	id     record.RunID
	queued *vocab.WaitProgress
}

// ended says how a start ended: a refusal is logged (with the code crew
// gives it), a detached run's id printed, and a signal crew took ends
// crew by that signal.
func (o *startOptions) ended(d *dispatch.Dispatcher, s streams, task string, run detached, err error, relay *signalRelay) error {
	runID := run.id
	received, pending := relay.finish()
	var refused *vocab.RefusedError
	if errors.As(err, &refused) {
		err = &chosenRefusal{err: err, code: o.refusedExit.codeFor(refused), quiet: o.quiet.about(refused)}
		d.RecordRefusal(task, refused, exitCodeFor(err))
	}
	if o.detach && err == nil {
		if err := o.printDetached(s, task, run); err != nil {
			return err
		}
		if received == 0 && pending != 0 {
			// It came while the run was handed over, which nobody
			// interrupts: the run goes on, detached as asked, but the
			// script that started it was interrupted all the same.
			received = pending
			fmt.Fprintf(s.Err, "crew: %s: received %s; run %s goes on, detached (`crew stop %s` ends it)\n",
				quoteTask(task), vocab.SignalName(received), runID, runID)
		}
	}
	return interrupted(aboutTask(task, err), received)
}

// checkArgs checks crew start's command line: the task (before --, or
// --task) and the command, and the flags that go together. It returns the
// arguments with the task first, and where the command begins.
func (o *startOptions) checkArgs(cmd *cobra.Command, args []string) ([]string, int, error) {
	if limit, ok := misplacedWaitLimit(o.argv); ok {
		return nil, 0, &usageError{fmt.Errorf("--wait takes its limit only after \"=\": write --wait=%s (a separate word after --wait is read as the task name)", limit)}
	}
	switch {
	case o.json && !o.detach:
		return nil, 0, &usageError{fmt.Errorf("--json goes with --detach (it prints the detached run's id as JSON); a foreground start's output is its command's own, and its exit code is the command's")}
	}
	dash := cmd.ArgsLenAtDash()
	if cmd.Flags().Changed("task") {
		// The task is the flag's; everything after -- is the command.
		switch {
		case dash > 0:
			return nil, 0, &usageError{fmt.Errorf("give the task name once: with --task, or before --, not both (got --task=%s and %q)", strconv.Quote(o.task), args[:dash])}
		case dash < 0 || dash == len(args):
			return nil, 0, &usageError{fmt.Errorf("missing command: give it after --, as in crew start --task=%s -- COMMAND [ARGS...]", strconv.Quote(o.task))}
		}
		args = append([]string{o.task}, args...)
		dash = 1
	}
	switch {
	case len(args) == 0:
		return nil, 0, &usageError{fmt.Errorf("missing task name: usage is crew start TASK -- COMMAND [ARGS...]")}
	case dash < 0 && len(args) > 1:
		return nil, 0, &usageError{fmt.Errorf("missing `--` before the command: did you forget it? As in: crew start %s -- %s", shellWord(args[0]), shellQuote(args[1:]))}
	case dash < 0 || dash == len(args):
		return nil, 0, &usageError{fmt.Errorf("missing command: give it after --, as in crew start %s -- COMMAND [ARGS...]", args[0])}
	case dash != 1:
		return nil, 0, &usageError{fmt.Errorf("expected one task name before --, got %d: %q", dash, args[:dash])}
	case o.lockTimeout <= 0:
		return nil, 0, &usageError{fmt.Errorf("--lock-timeout must be positive, not %s", o.lockTimeout)}
	case o.wait.set && o.force:
		return nil, 0, &usageError{fmt.Errorf("--wait and --force do not go together: --force skips the line")}
	case o.grace < 0:
		return nil, 0, &usageError{fmt.Errorf("--grace must not be negative, not %s", o.grace)}
	}
	return args, dash, nil
}

// printDetached prints a detached run's id: bare, or as JSON. A start
// that waits in line in the background also says where it stands: in the
// JSON, or on stderr (unless --quiet), so that stdout is the id alone.
func (o *startOptions) printDetached(s streams, task string, run detached) error {
	if o.json {
		out := map[string]any{"version": 1, "runId": run.id}
		if q := run.queued; q != nil {
			out["queued"], out["position"] = true, q.Position
		}
		return writeJSON(s.Out, out)
	}
	fmt.Fprintln(s.Out, run.id)
	if q := run.queued; q != nil && !o.quiet.all {
		fmt.Fprintf(s.Err, "crew: %s: run %s waits in line in the background (%s)\n", quoteTask(task), run.id, describeWait(*q))
	}
	return nil
}
