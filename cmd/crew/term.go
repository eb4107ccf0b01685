package main

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
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
