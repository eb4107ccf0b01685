package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/dispatch"
)

// waitView shows a waiting start to a human; every line names the task,
// so that in a CI log of parallel starts each says whose it is. On a terminal it keeps one
// line up to date; elsewhere (CI logs, cron mail) it prints one line when
// the wait starts and one when the run is admitted.
type waitView struct {
	w        io.Writer
	terminal bool
	task     string

	mu      sync.Mutex
	last    *dispatch.WaitProgress
	printed bool
	problem string // the config problem last shown
	stop    chan struct{}
}

func newWaitView(w io.Writer, task string) *waitView {
	v := &waitView{w: w, task: task, stop: make(chan struct{})}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		v.terminal = true
		go v.tick()
	}
	return v
}

// update is dispatch's OnWait callback.
func (v *waitView) update(p dispatch.WaitProgress) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if p.Admitted {
		waited := time.Since(p.Since).Round(time.Millisecond)
		if v.terminal {
			fmt.Fprintf(v.w, "\r\x1b[K")
		}
		fmt.Fprintf(v.w, "crew: %s: admitted %s after waiting %s\n", quoteTask(v.task), p.RunID, waited)
		v.last = nil
		return
	}
	first := v.last == nil && !v.printed
	news := p.ConfigErr != v.problem // a config problem appeared, changed or went
	v.last, v.problem = &p, p.ConfigErr
	switch {
	case v.terminal:
		v.render()
	case first || news:
		fmt.Fprintf(v.w, "crew: %s: %s\n", quoteTask(v.task), describeWait(p, v.task))
	}
	v.printed = true
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

func (v *waitView) render() {
	fmt.Fprintf(v.w, "\r\x1b[Kcrew: %s: %s", quoteTask(v.task), describeWait(*v.last, v.task))
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

func describeWait(p dispatch.WaitProgress, task string) string {
	pos := ordinal(p.Position) + " in line"
	if p.ConfigErr != "" {
		return fmt.Sprintf("waiting, %s, for crew.json to be fixed (retrying): %s", pos, p.ConfigErr)
	}
	var why string
	switch p.Reason {
	case admission.WaitTask:
		if p.BlockingRun != nil {
			why = fmt.Sprintf("waiting for task %s: already running as %s for %s", quoteTask(task), p.BlockingRun.RunID, since(p.BlockingRun.Since))
		} else {
			why = fmt.Sprintf("waiting for task %s: an older waiting start of it goes first", quoteTask(task))
		}
		return fmt.Sprintf("%s, %s", why, pos)
	case admission.WaitPool:
		why = fmt.Sprintf("waiting for a slot in pool %s: %s, %d/%d pool slots busy (%d/%d in all)", quoteTask(p.Pool), pos, p.PoolInUse, p.PoolMax, p.InUse, p.Maximum)
	default:
		why = fmt.Sprintf("waiting for a slot: %s, %d/%d slots busy", pos, p.InUse, p.Maximum)
	}
	if p.Oldest != nil {
		why += fmt.Sprintf(" (oldest: %s %s for %s)", quoteTask(p.Oldest.Task), p.Oldest.RunID, since(p.Oldest.Since))
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
