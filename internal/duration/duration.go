// Package duration parses and formats the human durations crew's flags and
// crew.json take: Go durations (90s, 10m, 1h30m, 1.5h) plus days (7d,
// 1d12h, 30d). A day is 24 hours, whatever the calendar or the clock's
// daylight-saving shifts.
package duration

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Day is the length of the unit d.
const Day = 24 * time.Hour

// Forms says what Parse accepts, for error messages.
const Forms = "a number and a unit, such as 90s, 10m, 1h30m, 7d or 1d12h (units: ns, us, ms, s, m, h, d)"

// Error is a duration that could not be parsed.
type Error struct {
	Input string
	Why   string // empty: not a duration at all
}

func (e *Error) Error() string {
	if e.Why != "" {
		return fmt.Sprintf("invalid duration %q: %s", e.Input, e.Why)
	}
	return fmt.Sprintf("invalid duration %q: use %s", e.Input, Forms)
}

// Parse parses a Go duration with days allowed as a unit: "7d", "1d12h",
// "1.5d", "-2h" (negative durations parse; callers that take none say so).
// "0" is zero, as in Go.
func Parse(s string) (time.Duration, error) {
	in := s
	if s == "" {
		return 0, &Error{Input: in}
	}
	neg := false
	if s[0] == '-' || s[0] == '+' {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "0" {
		return 0, nil
	}
	if s == "" {
		return 0, &Error{Input: in}
	}
	var total float64 // nanoseconds; exact for anything a day count can express sensibly
	var exact time.Duration
	rest := s
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		num := rest[:i]
		j := i
		for j < len(rest) && !(rest[j] >= '0' && rest[j] <= '9' || rest[j] == '.') {
			j++
		}
		unit := rest[i:j]
		rest = rest[j:]
		if num == "" || unit == "" {
			if num != "" && unit == "" {
				return 0, &Error{Input: in, Why: fmt.Sprintf("%s has no unit; use %s", num, Forms)}
			}
			return 0, &Error{Input: in}
		}
		if unit != "d" {
			d, err := time.ParseDuration(num + unit)
			if err != nil {
				if strings.Contains(err.Error(), "unknown unit") {
					return 0, &Error{Input: in, Why: fmt.Sprintf("unknown unit %q; use %s", unit, Forms)}
				}
				return 0, &Error{Input: in}
			}
			exact += d
			total += float64(d)
			continue
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, &Error{Input: in}
		}
		days := f * float64(Day)
		if whole, frac := math.Modf(f); frac == 0 && whole < float64(math.MaxInt64/int64(Day)) {
			exact += time.Duration(whole) * Day
		} else {
			exact += time.Duration(days)
		}
		total += days
	}
	if total > float64(math.MaxInt64) || exact < 0 {
		return 0, &Error{Input: in, Why: "too long (the most is about 106751d)"}
	}
	if neg {
		return -exact, nil
	}
	return exact, nil
}

// Format renders d the way Parse reads it, with days where it has whole
// days: 30d, 1d12h, 90m0s → 1h30m, 2h0m0s → 2h.
func Format(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	var b strings.Builder
	b.WriteString(sign)
	if days := d / Day; days > 0 {
		fmt.Fprintf(&b, "%dd", days)
		d -= days * Day
		if d == 0 {
			return b.String()
		}
	}
	s := d.String()
	// Go writes 1h30m0s and 2h0m0s; trim the zero tails.
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	b.WriteString(s)
	return b.String()
}

// Value is a flag value (it satisfies pflag.Value) holding a duration
// parsed with Parse.
type Value struct{ p *time.Duration }

// NewValue returns a flag value that stores into p, set to def.
func NewValue(p *time.Duration, def time.Duration) *Value {
	*p = def
	return &Value{p: p}
}

func (v *Value) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return Format(*v.p)
}

// Set parses s.
func (v *Value) Set(s string) error {
	d, err := Parse(s)
	if err != nil {
		return err // a *Error, for the command line to phrase
	}
	*v.p = d
	return nil
}

// Type names the flag's type in usage messages.
func (v *Value) Type() string { return "duration" }
