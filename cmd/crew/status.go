package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/record"
)

type statusOptions struct {
	*globalOptions
	json bool
}

func newStatusCmd(g *globalOptions, s streams) *cobra.Command {
	o := &statusOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "status [TASK|RUN-ID] [--json]",
		Short: "Show what holds the slots, and the latest finished runs",
		Long: `Show the slots in use and the cap, every active run (task, run id, state, since,
supervisor pid, command pid, whether its owner is alive), and the last 10
finished runs. With TASK, only that task's runs; with RUN-ID, that one run.

status never takes the admission lock and never creates or changes a file.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeRuns(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			markRan(cmd)
			return o.run(args, s)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON (schema version 1, see README)")
	return cmd
}

func (o *statusOptions) run(args []string, s streams) error {
	d, err := o.dispatcher()
	if err != nil {
		return err
	}
	if len(args) == 1 && record.LooksLikeRunID(args[0]) {
		v, err := d.Run(record.RunID(args[0]))
		if errors.Is(err, os.ErrNotExist) {
			if q := o.findWaiting(d, record.RunID(args[0])); q != nil {
				return o.printWaiting(s, q)
			}
			return &usageError{fmt.Errorf("no run %s in the state root %s", args[0], d.Store.Root())}
		}
		if err != nil {
			return err
		}
		if o.json {
			return writeJSON(s.Out, v)
		}
		printRun(s.Out, v)
		return nil
	}
	task := ""
	if len(args) == 1 {
		task = args[0]
		if err := record.ValidateTask(task); err != nil {
			return &usageError{fmt.Errorf("invalid task name: %w", err)}
		}
	}
	snap, err := d.Status(task)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(s.Out, snap)
	}
	printSnapshot(s.Out, snap, task)
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printSnapshot(w io.Writer, snap *dispatch.Snapshot, task string) {
	cfg := "no config, default cap"
	if snap.ConfigExists {
		cfg = "config " + termSafe(snap.ConfigPath)
	}
	fmt.Fprintf(w, "State root %s (%s)\n", termSafe(snap.Root), termSafe(cfg))
	printSlots(w, snap)
	for _, p := range snap.Pools {
		fmt.Fprintf(w, "Pool %s: %d/%d in use\n", quoteTask(p.Name), p.InUse, p.MaximumInProgress)
	}
	printStorage(w, snap)
	title := "Active runs"
	if task != "" {
		title = fmt.Sprintf("Active runs of %s", strconv.Quote(task))
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	if len(snap.Active) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  RUN ID\tTASK\tSTATE\tSINCE\tSUPERVISOR\tPID\tOWNER")
		for _, r := range snap.Active {
			since := r.CreatedAt
			if r.StartedAt != nil {
				since = *r.StartedAt
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s (%s)\t%d\t%s\t%s\n", r.RunID, quoteTask(r.Task), termSafe(string(r.State)),
				humanTime(since), humanAge(time.Since(since)), r.SupervisorPID, pidOrDash(r.TaskPID), ownerWord(r))
		}
		tw.Flush()
	}
	if len(snap.Queue) > 0 {
		fmt.Fprintf(w, "\nQueue (in admission order):\n")
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  #\tRUN ID\tTASK\tPOOL\tWAITING FOR\tSINCE")
		for _, q := range snap.Queue {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s (%s)\n", q.Position, q.RunID, quoteTask(q.Task), dashIfEmpty(q.Pool),
				q.WaitingFor, humanTime(q.Since), humanAge(time.Since(q.Since)))
		}
		tw.Flush()
	}
	if task != "" {
		printTaskStory(w, snap, task)
	}
	if len(snap.Problems) > 0 {
		fmt.Fprintln(w, "\nProblems (run `crew recover` to quarantine unreadable records):")
		for _, p := range snap.Problems {
			held := ""
			if p.HoldsSlot {
				held = " [owner alive: counted as holding a slot]"
			}
			fmt.Fprintf(w, "  %s%s\n", termSafe(p.Error), held)
		}
	}
	fmt.Fprintf(w, "\nLast %d finished runs:\n", dispatch.FinishedShown)
	if len(snap.Finished) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  RUN ID\tTASK\tSTATE\tFINISHED\tEXIT\tREASON")
	for _, r := range snap.Finished {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", r.RunID, quoteTask(r.Task), termSafe(string(r.State)),
			humanTime(*r.FinishedAt), exitOrDash(r.ExitCode), termSafe(r.Reason))
	}
	tw.Flush()
}

func printRun(w io.Writer, r *dispatch.RunView) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Run", string(r.RunID))
	row("Task", quoteTask(r.Task))
	row("State", termSafe(string(r.State)))
	row("Command", termArgs(r.Command))
	row("Host", termSafe(r.Host))
	row("Created", humanTime(r.CreatedAt))
	if r.StartedAt != nil {
		row("Started", humanTime(*r.StartedAt))
	}
	if r.FinishedAt != nil {
		row("Finished", humanTime(*r.FinishedAt))
	}
	row("Exit code", exitOrDash(r.ExitCode))
	if r.Reason != "" {
		row("Reason", termSafe(r.Reason))
	}
	row("Supervisor pid", fmt.Sprint(r.SupervisorPID))
	row("Command pid", pidOrDash(r.TaskPID))
	if r.State.Active() {
		row("Owner", ownerWord(*r))
	}
	if r.Orphaned {
		row("Slot held by", holdersWord(r))
	}
	if r.Forced {
		row("Forced", "yes (admitted past the cap)")
	}
	if r.LogPath != "" {
		row("Log", termSafe(r.LogPath))
	}
	tw.Flush()
}

func ownerWord(r dispatch.RunView) string {
	switch {
	case r.Orphaned:
		return "orphaned (supervisor gone, command alive)"
	case r.OwnerAlive:
		return "alive"
	default:
		return "gone (holds no slot)"
	}
}

// holdersWord lists the processes that hold an orphan's slot.
func holdersWord(r *dispatch.RunView) string {
	switch {
	case r.HoldersUnknown != "":
		return "cannot tell: " + r.HoldersUnknown
	case len(r.HolderPIDs) == 0:
		return "no process crew can see"
	}
	pids := make([]string, len(r.HolderPIDs))
	for i, p := range r.HolderPIDs {
		pids[i] = fmt.Sprint(p)
	}
	return "pids " + strings.Join(pids, ", ")
}

func humanTime(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") }

func humanAge(d time.Duration) string {
	if d < time.Second {
		return "just now"
	}
	return d.Truncate(time.Second).String()
}

func ago(t time.Time) string {
	if d := time.Since(t); d >= time.Second {
		return d.Truncate(time.Second).String() + " ago"
	}
	return "just now"
}

func pidOrDash(pid int) string {
	if pid == 0 {
		return "-"
	}
	return fmt.Sprint(pid)
}

func exitOrDash(code *int) string {
	if code == nil {
		return "-"
	}
	return fmt.Sprint(*code)
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return quoteTask(s)
}

// printTaskStory explains one task: its active run's history, its place in
// the queue, and its last refused start if nothing ran since.
func printTaskStory(w io.Writer, snap *dispatch.Snapshot, task string) {
	for _, r := range snap.Active {
		fmt.Fprintf(w, "\nHistory of %s:\n", r.RunID)
		for _, ev := range r.Events {
			fmt.Fprintf(w, "  %s  %s\n", humanTime(ev.At), termSafe(ev.What))
		}
	}
	for _, q := range snap.Queue {
		fmt.Fprintf(w, "\n%s is waiting: %s in line for a %s since %s\n", quoteTask(task), ordinal(q.Position), q.WaitingFor, humanTime(q.Since))
	}
	if r := snap.LastRefusal; r != nil {
		fmt.Fprintf(w, "\nLast start refused at %s (%s, exit %d): %s\n", humanTime(r.At), ago(r.At), r.ExitCode, termSafe(r.Reason))
	}
}

// findWaiting looks for a waiting start (a queue ticket) with this id.
func (o *statusOptions) findWaiting(d *dispatch.Dispatcher, id record.RunID) *dispatch.QueueView {
	snap, err := d.Status("")
	if err != nil {
		return nil
	}
	for i := range snap.Queue {
		if snap.Queue[i].RunID == id {
			return &snap.Queue[i]
		}
	}
	return nil
}

// printWaiting shows a start that is still in the queue: its run id is
// already known, its run record is not written yet.
func (o *statusOptions) printWaiting(s streams, q *dispatch.QueueView) error {
	if o.json {
		return writeJSON(s.Out, map[string]any{
			"runId": q.RunID, "task": q.Task, "state": "queued", "createdAt": q.Since,
			"pool": q.Pool, "position": q.Position, "waitingFor": q.WaitingFor,
		})
	}
	tw := tabwriter.NewWriter(s.Out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Run:\t%s\n", q.RunID)
	fmt.Fprintf(tw, "Task:\t%s\n", quoteTask(q.Task))
	fmt.Fprintf(tw, "State:\tqueued, %s in line, waiting for a %s\n", ordinal(q.Position), q.WaitingFor)
	fmt.Fprintf(tw, "Since:\t%s (%s)\n", humanTime(q.Since), ago(q.Since))
	if q.Pool != "" {
		fmt.Fprintf(tw, "Pool:\t%s\n", quoteTask(q.Pool))
	}
	return tw.Flush()
}
