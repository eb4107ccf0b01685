package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/crew-dev/crew/internal/duration"
)

// flagError gives a flag value that does not parse crew's own message:
// the flag, the value, what was expected and an example, instead of Go's
// parse error (strconv.ParseInt: parsing "abc": invalid syntax).
func flagError(err error) error {
	var bad *pflag.InvalidValueError
	if !errors.As(err, &bad) {
		return err
	}
	f, v := bad.GetFlag(), bad.GetValue()
	name := "--" + f.Name
	cause := errors.Unwrap(bad)
	var num *strconv.NumError
	var dur *duration.Error
	goParse := errors.As(cause, &num) || (cause != nil && strings.HasPrefix(cause.Error(), "time: "))
	switch t := f.Value.Type(); {
	case t == "duration" && (goParse || errors.As(cause, &dur)):
		example := "90s"
		if _, err := strconv.ParseFloat(v, 64); err == nil {
			example = v + "s" // a number without a unit: most likely seconds
		}
		return fmt.Errorf("%s %s: not a duration; give a number and a unit, as in %s=%s (durations: 90s, 10m, 1h30m, 7d)",
			name, strconv.Quote(v), name, example)
	case goParse && strings.Contains(t, "int"):
		return fmt.Errorf("%s %s: not a whole number", name, strconv.Quote(v))
	case cause != nil:
		return fmt.Errorf("%s %s: %v", name, strconv.Quote(v), cause)
	}
	return err
}

// limitLike reports whether a word was most likely meant as --wait's
// limit: a Go duration, a number, a number with a unit as people write
// them (10min, 2hours, 1d), or a word for "no limit". (By hand, not a
// regular expression: compiling one would cost every crew start.)
func limitLike(w string) bool {
	switch w {
	case "forever", "never", "inf", "infinite", "infinity", "none", "unlimited":
		return true
	}
	if _, err := time.ParseDuration(w); err == nil {
		return true
	}
	i := 0
	for i < len(w) && (w[i] >= '0' && w[i] <= '9' || w[i] == '.') {
		i++
	}
	if i == 0 || strings.Trim(w[:i], ".") == "" {
		return false
	}
	switch w[i:] {
	case "", "d", "w", "sec", "secs", "second", "seconds", "min", "mins", "minute", "minutes",
		"hr", "hrs", "hour", "hours", "day", "days", "week", "weeks":
		return true
	}
	return false
}

// misplacedWaitLimit looks, in the words before --, for a bare --wait
// followed by a separate word that looks like a limit: --wait takes its
// limit only as --wait=D, so that word would be read as the task name.
func misplacedWaitLimit(args []string) (limit string, found bool) {
	for i, a := range args {
		if a == "--" {
			return "", false
		}
		if a != "--wait" || i+1 >= len(args) {
			continue
		}
		if next := args[i+1]; limitLike(next) {
			return next, true
		}
	}
	return "", false
}
