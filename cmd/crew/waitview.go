package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/vocab"
)

// waitView shows a waiting start to a human. On a terminal it keeps one
// line up to date, cut to the terminal's width (a line that wrapped would
// leave a stale line behind at every redraw); elsewhere (CI logs, cron
// mail) it prints one line when the wait starts (and when a config problem
// comes or goes) and one when the run is admitted. Every line names the
// task. --quiet silences it.
type waitView struct {
	w        io.Writer
	terminal bool
	quiet    bool
	task     string

	mu      sync.Mutex
	last    *vocab.WaitProgress
	printed bool
	problem string // the config problem last shown
	stop    chan struct{}
}

func newWaitView(w io.Writer, task string, quiet bool) *waitView {
	v := &waitView{w: w, task: task, quiet: quiet, stop: make(chan struct{})}
	if f, ok := w.(*os.File); ok && !quiet && term.IsTerminal(int(f.Fd())) {
		v.terminal = true
		go v.tick()
	}
	return v
}

// prefix starts every line: crew's and the task's names.
func (v *waitView) prefix() string { return "crew: " + quoteTask(v.task) + ": " }

// update is dispatch's OnWait callback.
func (v *waitView) update(p vocab.WaitProgress) {
	if v.quiet {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if p.Admitted {
		waited := time.Since(p.Since).Round(time.Millisecond)
		if v.terminal {
			fmt.Fprintf(v.w, "\r\x1b[K")
		}
		fmt.Fprintf(v.w, "%sadmitted as run %s after waiting %s\n", v.prefix(), p.RunID.Short(), waited)
		v.last = nil
		return
	}
	first := v.last == nil && !v.printed
	problem := p.ConfigErr + p.QueueErr
	news := problem != v.problem // a problem appeared, changed or went
	v.last, v.problem = &p, problem
	switch {
	case v.terminal:
		v.render()
	case first || news:
		fmt.Fprintf(v.w, "%s%s\n", v.prefix(), describeWait(p))
	}
	v.printed = true
}

// note is a line crew start says about its run once admitted (a retry),
// named like the others and silenced by --quiet too.
func (v *waitView) note(line string) {
	if v.quiet {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	fmt.Fprintf(v.w, "%s%s\n", v.prefix(), termSafe(line))
}

func (v *waitView) tick() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-v.stop:
			return
		case <-t.C:
			v.mu.Lock()
			if v.last != nil {
				v.render()
			}
			v.mu.Unlock()
		}
	}
}

// render redraws the line in place, one column short of the terminal's
// width so the cursor never wraps.
// A task name longer than a third of the terminal is cut in it, so that
// the line still says what the start waits for.
func (v *waitView) render() {
	line := v.prefix() + describeWait(*v.last)
	if width := terminalWidth(v.w); width > 1 {
		task := truncateMiddle(quoteTask(v.task), max(12, width/3))
		line = truncate("crew: "+task+": "+describeWait(*v.last), width-1)
	}
	fmt.Fprintf(v.w, "\r\x1b[K%s", line)
}

// close ends the view, clearing a half-drawn line.
func (v *waitView) close() {
	close(v.stop)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.terminal && v.last != nil {
		fmt.Fprintf(v.w, "\r\x1b[K")
	}
}

// describeWait says why a start waits, shortest first: the task is named
// by the line's prefix, runs by their short ids.
func describeWait(p vocab.WaitProgress) string {
	pos := ordinal(p.Position) + " in line"
	if p.ConfigErr != "" {
		return fmt.Sprintf("waiting, %s, for crew.json to be fixed (retrying): %s", pos, p.ConfigErr)
	}
	if p.QueueErr != "" {
		return fmt.Sprintf("waiting, its place in line kept, for the queue to be readable (retrying): %s", termSafe(p.QueueErr))
	}
	var why string
	switch p.Reason {
	case admission.WaitTask:
		if p.BlockingRun != nil {
			return fmt.Sprintf("waiting for its run %s to end (running %s), %s", p.BlockingRun.RunID.Short(), since(p.BlockingRun.Since), pos)
		}
		return fmt.Sprintf("waiting for an older waiting start of the task to go first, %s", pos)
	case admission.WaitPool:
		why = fmt.Sprintf("waiting for a slot in pool %s: %s, %d/%d pool slots busy (%d/%d in all)", quoteTask(p.Pool), pos, p.PoolInUse, p.PoolMax, p.InUse, p.Maximum)
	default:
		why = fmt.Sprintf("waiting for a slot: %s, %d/%d slots busy", pos, p.InUse, p.Maximum)
	}
	if p.Oldest != nil {
		why += fmt.Sprintf(" (oldest: %s %s, %s)", quoteTask(p.Oldest.Task), p.Oldest.RunID.Short(), since(p.Oldest.Since))
	}
	return why
}

func since(t time.Time) string {
	if d := time.Since(t); d >= time.Second {
		return d.Truncate(time.Second).String()
	}
	return "under a second"
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
