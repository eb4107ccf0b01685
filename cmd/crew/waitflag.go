package main

import (
	"fmt"
	"time"

	"github.com/crew-dev/crew/internal/duration"
)

// waitFlag is --wait[=DURATION]: given alone it waits without a limit;
// --wait=0 does not wait at all, as flock -w 0 does not: it is a start
// without --wait (refused at once if it cannot run now).
type waitFlag struct {
	set     bool
	timeout time.Duration // 0: no limit
}

func (w *waitFlag) String() string {
	if !w.set {
		return ""
	}
	if w.timeout == 0 {
		return "forever"
	}
	return duration.Format(w.timeout)
}

func (w *waitFlag) Set(s string) error {
	if s == "forever" || s == "" {
		w.set, w.timeout = true, 0
		return nil
	}
	d, err := duration.Parse(s)
	if err != nil {
		return err // flagError says it in crew's words
	}
	if d < 0 {
		return fmt.Errorf("must not be negative (--wait=0 does not wait)")
	}
	w.set, w.timeout = d > 0, d
	return nil
}

func (w *waitFlag) Type() string { return "duration" }
