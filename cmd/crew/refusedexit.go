package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/crew-dev/crew/internal/vocab"
)

// The two reasons a start is refused, as crew start's --refused-exit and
// --quiet name them: by crew's exit code for it, or by a word. A cron job
// wants them apart: "my previous run still runs" is fine, "the slots are
// busy with other tasks" is a job that did not run and must say so.
const (
	reasonBusy    = 0 // 75: all slots, or the pool's, are busy
	reasonRunning = 1 // 76: the task already has an active run (or an older waiting start)
)

// reasonOf is the reason of a refusal.
func reasonOf(r *vocab.RefusedError) int {
	if r.Kind == vocab.TaskActive {
		return reasonRunning
	}
	return reasonBusy
}

// parseReason reads a reason: 75 or busy, 76 or running.
func parseReason(s string) (int, bool) {
	switch s {
	case "75", "busy":
		return reasonBusy, true
	case "76", "running":
		return reasonRunning, true
	}
	return 0, false
}

// refusedExit is --refused-exit: N for every refusal, or REASON=N for one
// (76=0, running=0; 75=3, busy=3), repeated or comma-separated. A reason
// given no code exits crew's own (75, 76).
type refusedExit struct {
	codes [2]int // by reason; -1: crew's own
	set   bool
}

func newRefusedExit() refusedExit { return refusedExit{codes: [2]int{-1, -1}} }

// refusedExitForms is what --refused-exit accepts, for its errors.
const refusedExitForms = "give N for every refusal, or 76=N (running=N: the task already runs) " +
	"or 75=N (busy=N: the slots are busy) for one, N an exit code from 0 to 255; " +
	"several with commas, as in 76=0,75=3"

func (x *refusedExit) String() string {
	if !x.set {
		return ""
	}
	if x.codes[reasonBusy] == x.codes[reasonRunning] {
		return strconv.Itoa(x.codes[reasonBusy])
	}
	var parts []string
	for r, name := range []string{"75", "76"} {
		if x.codes[r] >= 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", name, x.codes[r]))
		}
	}
	return strings.Join(parts, ",")
}

func (x *refusedExit) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		reason, code, hasReason := strings.Cut(part, "=")
		if !hasReason {
			reason, code = "", part
		}
		n, err := strconv.Atoi(strings.TrimSpace(code))
		if err != nil || n < 0 || n > 255 {
			return errors.New(refusedExitForms)
		}
		if !hasReason {
			x.codes = [2]int{n, n}
			continue
		}
		r, ok := parseReason(strings.TrimSpace(reason))
		if !ok {
			return fmt.Errorf("%q is not a reason crew refuses a start for; %s", reason, refusedExitForms)
		}
		x.codes[r] = n
	}
	x.set = true
	return nil
}

func (x *refusedExit) Type() string { return "N|REASON=N" }

// codeFor is the exit code chosen for a refusal, -1 for crew's own.
func (x *refusedExit) codeFor(r *vocab.RefusedError) int { return x.codes[reasonOf(r)] }

// quietFlag is --quiet[=REASON]: alone, crew start says nothing when not
// admitted, and no waiting or admitted lines; with a reason (76 or
// running, 75 or busy), it says nothing about refusals for that reason
// only, and everything else as usual.
type quietFlag struct {
	all     bool
	reasons [2]bool
}

// quietForms is what --quiet accepts, for its errors.
const quietForms = "give --quiet alone (every refusal and the waiting lines), or --quiet=76 (running: the task already runs) " +
	"or --quiet=75 (busy: the slots are busy) for one reason, with \"=\""

func (q *quietFlag) String() string {
	switch {
	case q.all:
		return "true"
	case q.reasons[reasonBusy] && q.reasons[reasonRunning]:
		return "75,76"
	case q.reasons[reasonBusy]:
		return "75"
	case q.reasons[reasonRunning]:
		return "76"
	}
	return "false"
}

func (q *quietFlag) Set(s string) error {
	switch s {
	case "true", "all":
		q.all = true
		return nil
	case "false":
		*q = quietFlag{}
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		r, ok := parseReason(strings.TrimSpace(part))
		if !ok {
			return errors.New(quietForms)
		}
		q.reasons[r] = true
	}
	return nil
}

// Type is "bool" for the help, which shows it as a switch (--quiet) and
// says the rest in words.
func (q *quietFlag) Type() string { return "bool" }

// about reports whether crew keeps quiet about a refusal.
func (q *quietFlag) about(r *vocab.RefusedError) bool { return q.all || q.reasons[reasonOf(r)] }
