package main

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/crew-dev/crew/internal/vocab"
)

// termSafe makes text that comes from the state root (task names, commands,
// reasons, paths, file names in messages) safe to print on a terminal:
// every character that does not print as itself (control characters and
// escape sequences, format characters such as U+202E RIGHT-TO-LEFT
// OVERRIDE or U+200B ZERO WIDTH SPACE, line and paragraph separators,
// spaces other than U+0020, invalid UTF-8) is shown as its Go escape
// (\x1b, \u202e, \xff). Whoever can write a record can then make crew
// print odd text, but never move the cursor, recolour the screen, or make
// one name look like another. JSON output needs none of this: the
// encoder escapes what it must, and scripts read the exact bytes.
func termSafe(s string) string {
	if printable(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// termError is err's message made safe for the terminal as termSafe
// makes text, except for the line breaks crew put there itself: errors
// that errors.Join combined stay on lines of their own (each under the
// first, indented), an ambiguous run's candidates one per line, cobra's
// messages as cobra laid them out; while a line break in a file name, a
// record or any other text from the state root is escaped like any
// control character. Which is which is told from the errors themselves,
// not the text.
func termError(err error) string {
	return renderError(err, "\n  ")
}

// renderError renders err, breaking lines with br where errors.Join did.
func renderError(err error, br string) string {
	switch e := err.(type) {
	case *vocab.AmbiguousError:
		return renderAmbiguous(e)
	case *cobraError:
		return e.render()
	}
	msg := err.Error()
	if !strings.Contains(msg, "\n") {
		return termSafe(msg)
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		errs := u.Unwrap()
		if !isJoin(msg, errs) {
			return renderAround(msg, errs, br) // several %w in one message
		}
		lines := make([]string, 0, len(errs))
		for _, e := range errs {
			if e != nil {
				lines = append(lines, renderError(e, br))
			}
		}
		return strings.Join(lines, br)
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			return renderAround(msg, []error{inner}, br)
		}
	}
	return termSafe(msg)
}

// isJoin reports whether msg is errs' messages one per line, as
// errors.Join writes them: the line breaks between them are crew's own.
func isJoin(msg string, errs []error) bool {
	var parts []string
	for _, e := range errs {
		if e != nil {
			parts = append(parts, e.Error())
		}
	}
	return len(parts) > 1 && msg == strings.Join(parts, "\n")
}

// renderAround renders msg, a wrapper's words around the messages of
// errs (in that order): the words escaped, each error rendered. A message
// that does not hold them where expected is escaped whole.
func renderAround(msg string, errs []error, br string) string {
	var b strings.Builder
	rest := msg
	for _, e := range errs {
		if e == nil {
			continue
		}
		inner := e.Error()
		i := strings.Index(rest, inner)
		if i < 0 {
			return termSafe(msg)
		}
		b.WriteString(termSafe(rest[:i]))
		b.WriteString(renderError(e, br))
		rest = rest[i+len(inner):]
	}
	b.WriteString(termSafe(rest))
	return b.String()
}

// renderAmbiguous lists the runs an ambiguous argument fits, one per line,
// from the error's fields: the ids, states and task names are the state
// root's, each made safe; the line breaks are crew's.
func renderAmbiguous(e *vocab.AmbiguousError) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is ambiguous: it fits %d runs:", termSafe(e.Arg), len(e.Candidates)+e.More)
	for _, c := range e.Candidates {
		fmt.Fprintf(&b, "\n  %s  %s  %s", termSafe(string(c.ID)), termSafe(c.State), quoteTask(c.Task))
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "\n  and %d more", e.More)
	}
	b.WriteString("\ngive more of the id")
	return b.String()
}

// cobraError is an error of cobra's own (an unknown command and what it
// may have meant, a wrong number of arguments): its line breaks and
// leading tabs are cobra's layout, and what the user typed in it is
// quoted (%q) already. Its lines are made safe one by one, and the blank
// lines it ends with dropped.
type cobraError struct{ err error }

func (e *cobraError) Error() string { return e.err.Error() }
func (e *cobraError) Unwrap() error { return e.err }

func (e *cobraError) render() string {
	lines := strings.Split(strings.TrimRight(e.err.Error(), "\n"), "\n")
	for i, l := range lines {
		body := strings.TrimLeft(l, "\t")
		lines[i] = l[:len(l)-len(body)] + termSafe(body)
	}
	return strings.Join(lines, "\n")
}

// printable reports whether every character of s prints as itself.
func printable(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return false
			}
		}
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// quoteTask shows a task (or pool) name unambiguously: as it is when it
// is plain, quoted with Go escapes when it has spaces, quotes or a
// character that does not print (an older crew accepted such names).
func quoteTask(t string) string {
	if strings.ContainsAny(t, " \t\"") || !printable(t) {
		return strconv.Quote(t)
	}
	return t
}
