package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
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

// unknownFlag is an unknown flag's error with the hint most likely to
// help: the flag of cmd nearest to it (a typo: --wiat, --jsno, -wait),
// else nothing. crew start adds its own (startFlagHint).
func unknownFlag(cmd *cobra.Command, err error) error {
	var nx *pflag.NotExistError
	if !errors.As(err, &nx) {
		return err
	}
	if near := nearestFlags(cmd.Flags(), typedName(nx)); len(near) > 0 {
		return fmt.Errorf("%w: did you mean %s?", err, strings.Join(near, " or "))
	}
	return err
}

// typedName is the name an unknown flag was given as, without dashes:
// "wiat" for --wiat, "wait" for -wait (read as shorthands, but most likely
// a long flag's name with one dash).
func typedName(nx *pflag.NotExistError) string {
	if short := nx.GetSpecifiedShortnames(); short != "" {
		return short
	}
	return nx.GetSpecifiedName()
}

// typedWord is the unknown flag as it was typed: --wiat, -j2.
func typedWord(nx *pflag.NotExistError) string {
	if short := nx.GetSpecifiedShortnames(); short != "" {
		return "-" + short
	}
	return "--" + nx.GetSpecifiedName()
}

// nearestFlags are the visible flags of fs nearest to name, as --name: at
// an edit distance of at most a third of name's length (at least 1;
// letters swapped count once), or that name begins (3 letters at least).
// None if nothing is that near: a hint that is a guess misleads.
func nearestFlags(fs *pflag.FlagSet, name string) []string {
	name = strings.ToLower(name)
	limit := max(1, len(name)/3)
	best := limit + 1
	var near []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		d := editDistance(name, f.Name)
		if len(name) >= 3 && strings.HasPrefix(f.Name, name) {
			d = min(d, limit)
		}
		switch {
		case d < best:
			best, near = d, []string{"--" + f.Name}
		case d == best:
			near = append(near, "--"+f.Name)
		}
	})
	return near
}

// editDistance is the optimal string alignment distance between a and b:
// how many letters inserted, deleted, replaced, or swapped with the next
// one, turn a into b (Levenshtein's, with a swap as one edit, which is the
// typo people make: --wiat).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// startFlagHint is crew start's hint for an unknown flag, given the words
// read before it (cmd.Flags().Args() when parsing stopped) and crew's
// command line: with a task and a command word read, the flag is most
// likely the command's own, and -- was forgotten; else the nearest of
// crew start's flags; else, with no task read yet, a task name that
// begins with -.
func startFlagHint(cmd *cobra.Command, err error, argv []string) error {
	var nx *pflag.NotExistError
	if !errors.As(err, &nx) {
		return err
	}
	words := cmd.Flags().Args()
	switch {
	case len(words) >= 2:
		return fmt.Errorf("%w: did you forget `--` before the command? As in: %s", err, withDash(words, typedWord(nx), argv))
	case len(nearestFlags(cmd.Flags(), typedName(nx))) > 0:
		return unknownFlag(cmd, err)
	case len(words) == 0:
		return fmt.Errorf("%w (a task name that begins with - is given as --task=NAME)", err)
	}
	return err
}

// withDash is the crew start line that was most likely meant: the task,
// --, then the command's words read so far and the word that stopped the
// parse, as typed (--flag=value too), and "..." if more followed it.
func withDash(words []string, bad string, argv []string) string {
	i := slices.IndexFunc(argv, func(a string) bool { return a == bad || strings.HasPrefix(a, bad+"=") })
	if i >= 0 {
		bad = argv[i]
	}
	line := "crew start " + shellWord(words[0]) + " -- " + shellQuote(append(slices.Clone(words[1:]), bad))
	if i >= 0 && i < len(argv)-1 {
		line += " ..."
	}
	return line
}
