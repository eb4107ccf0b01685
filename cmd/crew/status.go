package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

type statusOptions struct {
	*globalOptions
	json   bool
	labels labelsFlag // --label: only runs that carry them
}

func newStatusCmd(g *globalOptions, s streams) *cobra.Command {
	o := &statusOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "status [TASK|RUN] [--label KEY=VALUE]... [--json]",
		Short: "Show what holds the slots, and the latest finished runs",
		Long: `Show the slots in use and the cap, every active run (short id, task, state, how
long it has run, pool, command pid, command), the queue, and the last 10
finished runs, newest finish first. With TASK, only that task's runs and its
story; with RUN (a run id, a unique beginning of one, or a short id such as
3f2a9c0d), that one run with its history. With --label KEY=VALUE
(repeatable), only the runs that carry every label given.

On a terminal, text fits its width (or $COLUMNS), cut with "…"; in a pipe
or a file it is not cut. States are coloured on a terminal unless NO_COLOR is
set. --json is never cut. status never takes the admission lock and never creates or
changes a file.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeRuns(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			markRan(cmd)
			return o.run(args, s)
		},
	}
	cmd.Flags().Var(&o.labels, "label", "only runs with this label (repeatable: all of them)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON (schema version 1, see docs/json.md)")
	return cmd
}

func (o *statusOptions) run(args []string, s streams) error {
	d, err := o.open(openOptions{})
	if err != nil {
		return err
	}
	defer d.Close()
	sc := screenFor(s.Out, o.getenv)
	task := ""
	if len(args) == 1 {
		ref, err := d.Lookup(args[0])
		if err != nil {
			return err
		}
		task = ref.Task
		if ref.Run != "" && len(o.labels.labels) > 0 {
			return &usageError{fmt.Errorf("--label selects among runs; it does not go with one run (%s): give a TASK or nothing", args[0])}
		}
		if ref.Run != "" {
			return o.showRun(d, ref.Run, s, sc)
		}
	}
	snap, err := d.Status(vocab.StatusQuery{Task: task, Labels: o.labels.labels})
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(s.Out, snap)
	}
	printSnapshot(s.Out, sc, snap, selection{task: task, labels: o.labels.labels}, time.Now())
	return nil
}

// showRun shows one run, or a waiting start.
func (o *statusOptions) showRun(d *dispatch.Dispatcher, id record.RunID, s streams, sc screen) error {
	v, err := d.Run(id)
	if errors.Is(err, os.ErrNotExist) {
		if q := o.findWaiting(d, id); q != nil {
			return o.printWaiting(s, q)
		}
		return &usageError{fmt.Errorf("no run %s in %s", id, d.Store.Where())}
	}
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(s.Out, v)
	}
	printRun(s.Out, sc, v, time.Now())
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// selection is what a status lists: a task's runs, runs with labels, or
// all ("" and none).
type selection struct {
	task   string
	labels record.Labels
}

// of is what a title says of the selection: " of TASK", " with label
// K=V", or nothing.
func (sel selection) of() string {
	out := ""
	if sel.task != "" {
		out = " of " + quoteTask(sel.task)
	}
	if len(sel.labels) > 0 {
		out += " with label " + termSafe(sel.labels.String())
	}
	return out
}

func printSnapshot(w io.Writer, sc screen, snap *vocab.Snapshot, sel selection, now time.Time) {
	task := sel.task
	cfg := "no config, default cap"
	if snap.ConfigExists {
		cfg = "config " + termSafe(snap.ConfigPath)
	}
	where := "State root"
	if strings.HasPrefix(snap.Root, "etcd://") {
		where = "Store"
	}
	fmt.Fprintf(w, "%s %s (%s)\n", where, termSafe(snap.Root), termSafe(cfg))
	printSlots(w, snap)
	for _, p := range snap.Pools {
		fmt.Fprintf(w, "Pool %s: %d/%d in use\n", quoteTask(p.Name), p.InUse, p.MaximumInProgress)
	}
	printStorage(w, snap)
	title := "Active runs" + sel.of()
	fmt.Fprintf(w, "\n%s:\n", title)
	if len(snap.Active) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		printActive(w, sc, snap, now)
	}
	if len(snap.Queue) > 0 {
		fmt.Fprintf(w, "\nQueue (in admission order):\n")
		var rows [][]cell
		fleet := strings.HasPrefix(snap.Root, "etcd://")
		for _, q := range snap.Queue {
			task := quoteTask(q.Task)
			if q.Unreadable {
				task = "(unreadable ticket)"
			}
			row := []cell{{text: fmt.Sprint(q.Position)}, {text: q.RunID.Short()}, {text: task},
				{text: dashIfEmpty(q.Pool)}, {text: string(q.WaitingFor)}, {text: shortDuration(now.Sub(q.Since))}}
			if fleet {
				row = append(row, cell{text: termSafe(q.Host)})
			}
			rows = append(rows, row)
		}
		cols := []column{{title: "#", right: true}, {title: "ID"}, {title: "TASK", min: 12, max: 24, middle: true},
			{title: "POOL", min: 6}, {title: "WAITING FOR"}, {title: "WAITED"}}
		if fleet {
			cols = append(cols, column{title: "HOST", min: 4, max: 24})
		}
		sc.table(w, cols, rows)
	}
	if task != "" {
		printTaskStory(w, sc, snap, task)
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
	title = fmt.Sprintf("Last %d finished runs%s, newest finish first", vocab.FinishedShown, sel.of())
	fmt.Fprintf(w, "\n%s:\n", title)
	if len(snap.Finished) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	printFinished(w, sc, snap.Finished, now, task == "")
}

// activeState is an active run's state as status shows it: the record's,
// unless its owner says otherwise.
func activeState(r vocab.RunView) string {
	switch {
	case r.Orphaned && r.CommandEnded != nil:
		return "exited" // what it left holds the slot
	case r.Orphaned:
		return "orphaned"
	case r.Owner == "dead":
		return "gone"
	case betweenAttempts(r.Run) != nil:
		return "retrying"
	}
	return termSafe(string(r.State))
}

// betweenAttempts is the attempt that ended, if the run is waiting to
// run its command again (--retries).
func betweenAttempts(r record.Run) *record.Attempt {
	if a := r.Attempt(); r.State == record.Running && a != nil && a.EndedAt != nil {
		return a
	}
	return nil
}

// printActive is status's table of active runs, with a note under it for
// each run whose owner is not simply alive.
func printActive(w io.Writer, sc screen, snap *vocab.Snapshot, now time.Time) {
	pools := len(snap.Pools) > 0
	var rows [][]cell
	var notes []string
	for _, r := range snap.Active {
		pools = pools || r.Pool != ""
		since := r.CreatedAt
		if r.StartedAt != nil {
			since = *r.StartedAt
		}
		state := activeState(r)
		rows = append(rows, []cell{{text: r.RunID.Short()}, {text: quoteTask(r.Task)}, {text: state, color: stateColor(state)},
			{text: shortDuration(now.Sub(since))}, {text: dashIfEmpty(r.Pool)}, {text: termSafe(r.Host)}, {text: pidOrDash(r.TaskPID)}, {text: shellQuote(r.Command)}})
		switch {
		case r.Orphaned && r.CommandEnded != nil:
			notes = append(notes, fmt.Sprintf("%s: %s; %s; `crew stop %s` ends them", r.RunID.Short(),
				termSafe(r.CommandEnded.Describe()), leftoversWord(&r), r.RunID.Short()))
		case r.Orphaned:
			notes = append(notes, fmt.Sprintf("%s: orphaned: its supervisor (pid %d) is gone; the command still runs and holds its slot: %s",
				r.RunID.Short(), r.SupervisorPID, heldBy(&r)))
		case r.Owner == "dead":
			notes = append(notes, fmt.Sprintf("%s: its owner (pid %d) is gone: it holds no slot, and the next admission or `crew recover` finalizes it", r.RunID.Short(), r.SupervisorPID))
		case r.Owner == "unknown":
			notes = append(notes, fmt.Sprintf("%s: whether its owner lives cannot be told: counted as holding a slot", r.RunID.Short()))
		}
		if r.Forced {
			notes = append(notes, fmt.Sprintf("%s: forced: admitted past the cap with --force", r.RunID.Short()))
		}
		if a := betweenAttempts(r.Run); a != nil && state == "retrying" {
			next := a.EndedAt.Add(time.Duration(r.RetryDelay))
			notes = append(notes, fmt.Sprintf("%s: attempt %d of %d ended (%s); attempt %d at %s, holding its slot meanwhile",
				r.RunID.Short(), a.Number, r.MaxAttempts(), termSafe(a.Reason), a.Number+1, clock(next, now)))
		}
	}
	cols := []column{{title: "ID"}, {title: "TASK", min: 12, max: 24, middle: true}, {title: "STATE"}, {title: "FOR"},
		{title: "POOL", min: 6}, {title: "HOST", min: 4, max: 24}, {title: "PID", right: true}, {title: "COMMAND", flex: true}}
	drop := func(c int) {
		cols = append(cols[:c], cols[c+1:]...)
		for i := range rows {
			rows[i] = append(rows[i][:c], rows[i][c+1:]...)
		}
	}
	// On an etcd store runs are on many hosts (and a pid is a pid there).
	if !strings.HasPrefix(snap.Root, "etcd://") {
		drop(5)
	}
	if !pools {
		drop(4)
	}
	sc.table(w, cols, rows)
	for _, n := range notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}

// printFinished is a table of finished runs: status's and history's.
func printFinished(w io.Writer, sc screen, runs []vocab.RunView, now time.Time, withTask bool) {
	var rows [][]cell
	for _, r := range runs {
		started := r.CreatedAt
		if r.StartedAt != nil {
			started = *r.StartedAt
		}
		took := "-"
		if r.FinishedAt != nil {
			took = shortDuration(r.FinishedAt.Sub(started))
		}
		state, reason := stateWord(r.Run), termSafe(r.Reason)
		if a := r.Attempt(); a != nil && a.Number > 1 {
			reason = strings.TrimSuffix(fmt.Sprintf("attempt %d of %d: %s", a.Number, r.MaxAttempts(), reason), ": ")
		}
		row := []cell{{text: r.RunID.Short()}, {text: quoteTask(r.Task)}, {text: state, color: stateColor(state)},
			{text: exitOrDash(r.ExitCode)}, {text: clock(started, now)}, {text: took}, {text: reason}}
		if !withTask {
			row = append(row[:1], row[2:]...)
		}
		rows = append(rows, row)
	}
	cols := []column{{title: "ID"}, {title: "TASK", min: 12, max: 24, middle: true}, {title: "STATE"}, {title: "EXIT", right: true},
		{title: "STARTED"}, {title: "TOOK", right: true}, {title: "REASON", flex: true}}
	if !withTask {
		cols = append(cols[:1], cols[2:]...)
	}
	sc.table(w, cols, rows)
}

func printRun(w io.Writer, sc screen, r *vocab.RunView, now time.Time) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Run", fmt.Sprintf("%s (%s)", r.RunID, r.RunID.Short()))
	row("Task", quoteTask(r.Task))
	state := stateWord(r.Run)
	row("State", sc.paint(stateColor(state), state))
	row("Command", shellQuote(r.Command))
	if len(r.Labels) > 0 {
		row("Labels", termSafe(r.Labels.String()))
	}
	if r.Pool != "" {
		row("Pool", quoteTask(r.Pool))
	}
	row("Host", termSafe(r.Host))
	row("Created", humanTime(r.CreatedAt))
	if r.StartedAt != nil {
		row("Started", humanTime(*r.StartedAt))
	}
	switch {
	case r.FinishedAt != nil:
		row("Finished", humanTime(*r.FinishedAt))
		if r.StartedAt != nil {
			row("Took", shortDuration(r.FinishedAt.Sub(*r.StartedAt)))
		}
	case r.StartedAt != nil:
		row("Running for", shortDuration(now.Sub(*r.StartedAt)))
	}
	row("Exit code", exitOrDash(r.ExitCode))
	if r.Timeout > 0 {
		row("Timeout", duration.Format(time.Duration(r.Timeout))+" per attempt")
	}
	if a := r.Attempt(); a != nil {
		row("Attempt", fmt.Sprintf("%d of %d (retry delay %s)", a.Number, r.MaxAttempts(), duration.Format(time.Duration(r.RetryDelay))))
	}
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
	if len(r.Events) > 0 {
		fmt.Fprintln(w, "History:")
		for _, ev := range r.Events {
			fmt.Fprintf(w, "  %s  %s\n", humanTime(ev.At), termSafe(ev.What))
		}
	}
}

// stateWord is a run's state as text shows it: "timed out" for a run
// that failed because --timeout ended it (--json: "failed", "timedOut").
func stateWord(r record.Run) string {
	if r.TimedOut && r.State == record.Failed {
		return "timed out"
	}
	return termSafe(string(r.State))
}

func ownerWord(r vocab.RunView) string {
	switch {
	case r.Orphaned && r.CommandEnded != nil:
		return "the command has ended; " + leftoversWord(&r)
	case r.Orphaned:
		return "orphaned (supervisor gone, command alive)"
	case r.OwnerAlive:
		return "alive"
	default:
		return "gone (holds no slot)"
	}
}

// leftoversWord says what holds the slot of a run whose command has ended:
// "2 processes it left still hold the slot: pids 4711, 4712".
func leftoversWord(r *vocab.RunView) string {
	switch n := len(r.HolderPIDs); {
	case r.HoldersUnknown != "":
		return "processes it left still hold the slot (which, crew cannot tell: " + termSafe(r.HoldersUnknown) + ")"
	case n == 0:
		return "processes it left still hold the slot (none crew can see)"
	case n == 1:
		return fmt.Sprintf("1 process it left still holds the slot: pid %d", r.HolderPIDs[0])
	default:
		return fmt.Sprintf("%d processes it left still hold the slot: %s", n, holdersWord(r))
	}
}

// heldBy says which processes hold an orphan's slot, for status's note.
func heldBy(r *vocab.RunView) string {
	switch {
	case r.HoldersUnknown != "":
		return "which processes, crew cannot tell: " + termSafe(r.HoldersUnknown)
	case len(r.HolderPIDs) == 0:
		return "crew can see no process holding it"
	}
	return "held by " + holdersWord(r)
}

// holdersWord lists the processes that hold an orphan's slot.
func holdersWord(r *vocab.RunView) string {
	switch {
	case r.HoldersUnknown != "":
		return "cannot tell: " + termSafe(r.HoldersUnknown)
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
func printTaskStory(w io.Writer, sc screen, snap *vocab.Snapshot, task string) {
	for _, r := range snap.Active {
		fmt.Fprintf(w, "\nHistory of %s (%s):\n", r.RunID.Short(), r.RunID)
		for _, ev := range r.Events {
			fmt.Fprintf(w, "  %s  %s\n", humanTime(ev.At), termSafe(ev.What))
		}
	}
	for _, q := range snap.Queue {
		fmt.Fprintf(w, "\n%s is waiting: %s in line for a %s since %s\n", quoteTask(task), ordinal(q.Position), q.WaitingFor, humanTime(q.Since))
	}
	if r := snap.LastRefusal; r != nil {
		printRefusal(w, sc, r)
	}
}

// printRefusal says when the task's last start was refused and why,
// wrapped to the screen's width (the reason lists what held the slots,
// and can take hundreds of columns), the lines after the first indented.
func printRefusal(w io.Writer, sc screen, r *record.Refusal) {
	text := fmt.Sprintf("Last start refused at %s (%s, exit %d): %s", humanTime(r.At), ago(r.At), r.ExitCode, termSafe(r.Reason))
	fmt.Fprintln(w)
	for i, l := range wrapText(text, sc.width, 2) {
		if i > 0 {
			l = "  " + l
		}
		fmt.Fprintln(w, l)
	}
}

// findWaiting looks for a waiting start (a queue ticket) with this id.
func (o *statusOptions) findWaiting(d *dispatch.Dispatcher, id record.RunID) *vocab.QueueView {
	snap, err := d.Status(vocab.StatusQuery{})
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
func (o *statusOptions) printWaiting(s streams, q *vocab.QueueView) error {
	if o.json {
		v := map[string]any{
			"runId": q.RunID, "task": q.Task, "state": "queued", "createdAt": q.Since,
			"pool": q.Pool, "position": q.Position, "waitingFor": q.WaitingFor,
		}
		if len(q.Labels) > 0 {
			v["labels"] = q.Labels
		}
		return writeJSON(s.Out, v)
	}
	tw := tabwriter.NewWriter(s.Out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Run:\t%s\n", q.RunID)
	fmt.Fprintf(tw, "Task:\t%s\n", quoteTask(q.Task))
	fmt.Fprintf(tw, "State:\tqueued, %s in line, waiting for a %s\n", ordinal(q.Position), q.WaitingFor)
	fmt.Fprintf(tw, "Since:\t%s (%s)\n", humanTime(q.Since), ago(q.Since))
	if q.Pool != "" {
		fmt.Fprintf(tw, "Pool:\t%s\n", quoteTask(q.Pool))
	}
	if len(q.Labels) > 0 {
		fmt.Fprintf(tw, "Labels:\t%s\n", termSafe(q.Labels.String()))
	}
	return tw.Flush()
}
