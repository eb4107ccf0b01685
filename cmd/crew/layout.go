package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rivo/uniseg"
	"golang.org/x/term"
)

// Text output for people: laid out for the terminal's width when stdout is
// a terminal, else for $COLUMNS, else not cut at all (as ps, gh and git
// write to a pipe or a file: a CI log or a grep wants whole lines); coloured on a terminal
// unless TERM is dumb, and anywhere FORCE_COLOR or CLICOLOR_FORCE is set
// (to anything but 0: a CI log that renders colours), but never where
// NO_COLOR is set (no-color.org). JSON output is never laid out, cut or
// coloured.

// defaultWidth is the width text is laid out for on a terminal whose size
// cannot be read.
const defaultWidth = 80

// screen says how text output is laid out.
type screen struct {
	width int // 0: no limit, nothing is cut
	color bool
}

// screenFor lays out for w: its terminal's width and colours if it is a
// terminal, else $COLUMNS (or no limit) and no colour unless forced.
func screenFor(w io.Writer, getenv func(string) string) screen {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		width := defaultWidth
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			width = cols
		}
		return screen{width: width, color: colorWanted(getenv, getenv("TERM") != "dumb")}
	}
	sc := screen{color: colorWanted(getenv, false)}
	if n, err := strconv.Atoi(getenv("COLUMNS")); err == nil && n > 0 {
		sc.width = n
	}
	return sc
}

// colorWanted says whether to colour: never with NO_COLOR; always with
// FORCE_COLOR or CLICOLOR_FORCE set to anything but "0"; else as the
// screen would (a terminal that is not dumb).
func colorWanted(getenv func(string) string, screenWould bool) bool {
	forced := func(k string) bool { v := getenv(k); return v != "" && v != "0" }
	switch {
	case getenv("NO_COLOR") != "":
		return false
	case forced("FORCE_COLOR"), forced("CLICOLOR_FORCE"):
		return true
	}
	return screenWould
}

// terminalWidth is the width of the terminal f is, or 0 if it is none.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil || cols <= 0 {
		return 0
	}
	return cols
}

// paint colours s with an SGR code on a colour screen.
func (sc screen) paint(code, s string) string {
	if !sc.color || code == "" || s == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

// stateColor is the colour of a run's state.
func stateColor(state string) string {
	switch state {
	case "succeeded":
		return "32" // green
	case "failed", "interrupted", "timed out":
		return "31" // red
	case "stopped", "orphaned", "gone", "exited":
		return "33" // yellow
	case "running", "provisioning", "waiting", "queued", "retrying":
		return "36" // cyan
	}
	return ""
}

// cellWidth is how many columns s takes on a terminal: its grapheme
// clusters' East Asian widths as github.com/rivo/uniseg measures them
// (wide characters and emoji shown as emoji take two, combining marks
// none). s must be printable (made so by termSafe).
func cellWidth(s string) int { return uniseg.StringWidth(s) }

// ellipsis marks text cut to fit.
const ellipsis = "…"

// truncate cuts s to at most width columns, ending in an ellipsis if it
// was cut.
func truncate(s string, width int) string {
	if cellWidth(s) <= width {
		return s
	}
	if width <= 0 {
		return ""
	}
	return headOf(s, width-1) + ellipsis
}

// truncateMiddle cuts s to at most width columns in its middle, with an
// ellipsis there, keeping more of its end than of its beginning: names of
// one family (integration-tests:postgres, integration-tests:mysql) differ
// at the end, which a cut at the end would take away.
func truncateMiddle(s string, width int) string {
	if cellWidth(s) <= width {
		return s
	}
	if width < 3 {
		return truncate(s, width)
	}
	room := width - 1
	tail := tailOf(s, room-cellWidth(headOf(s, room*2/5)))
	// What the tail left (a wide character or an escape that did not fit
	// whole) goes to the head.
	return headOf(s, room-cellWidth(tail)) + ellipsis + tail
}

// headOf is the longest beginning of s, in whole grapheme clusters, that
// takes at most width columns.
func headOf(s string, width int) string {
	used, rest, state := 0, s, -1
	for rest != "" {
		next, w, st := firstCluster(rest, state)
		if used+w > width {
			break
		}
		used, rest, state = used+w, next, st
	}
	return s[:len(s)-len(rest)]
}

// tailOf is the longest end of s, in whole grapheme clusters, that takes
// at most width columns.
func tailOf(s string, width int) string {
	type cluster struct{ at, width int }
	var clusters []cluster
	rest, state := s, -1
	for rest != "" {
		next, w, st := firstCluster(rest, state)
		clusters = append(clusters, cluster{len(s) - len(rest), w})
		rest, state = next, st
	}
	at, used := len(s), 0
	for i := len(clusters) - 1; i >= 0 && used+clusters[i].width <= width; i-- {
		at, used = clusters[i].at, used+clusters[i].width
	}
	return s[at:]
}

// firstCluster splits off what a cut must keep whole at the beginning of
// s: an escape that termSafe or a quoted name put there (\x1b, \u202e, \"),
// which cut in two would read as part of the text, else a grapheme
// cluster. It returns the rest, the piece's width, and uniseg's state for
// the next call (-1 to start afresh).
func firstCluster(s string, state int) (rest string, width, newState int) {
	if n := escapeLen(s); n > 0 {
		return s[n:], n, -1
	}
	_, rest, width, newState = uniseg.FirstGraphemeClusterInString(s, state)
	return rest, width, newState
}

// escapeLen is the length of the Go escape s begins with, 0 if none.
func escapeLen(s string) int {
	if len(s) < 2 || s[0] != '\\' {
		return 0
	}
	var hex int
	switch s[1] {
	case 'x':
		hex = 2
	case 'u':
		hex = 4
	case 'U':
		hex = 8
	case 'a', 'b', 'f', 'n', 'r', 't', 'v', '\\', '"', '\'':
		return 2
	default:
		return 0
	}
	if len(s) < 2+hex {
		return 0
	}
	for _, c := range s[2 : 2+hex] {
		if !unicode.Is(unicode.ASCII_Hex_Digit, c) {
			return 0
		}
	}
	return 2 + hex
}

// wrapText breaks text into lines of at most width columns, at spaces,
// those after the first hang columns narrower (they are printed indented
// by that much); a word wider than its line is broken where the line ends,
// so that nothing is lost. width <= 0 leaves it one line.
func wrapText(text string, width, hang int) []string {
	if width <= 0 || cellWidth(text) <= width {
		return []string{text}
	}
	var lines []string
	room := func() int { return max(1, width-min(len(lines), 1)*hang) }
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
		case cellWidth(line)+1+cellWidth(word) <= room():
			word = line + " " + word
		default:
			lines = append(lines, line)
		}
		for cellWidth(word) > room() {
			head := headOf(word, room())
			if head == "" { // one character wider than the line
				rest, _, _ := firstCluster(word, -1)
				head = word[:len(word)-len(rest)]
			}
			lines = append(lines, head)
			word = word[len(head):]
		}
		line = word
	}
	if line == "" { // the last word was broken whole into lines
		return lines
	}
	return append(lines, line)
}

// column is one column of a table.
type column struct {
	title string
	// min is the narrowest the column may be cut to (0: never cut). The
	// flexible column (a command, a reason) is cut first, down to
	// flexRoom, then the others down to their min, then the flexible one
	// down to its min.
	min  int
	flex bool
	// max caps the column's width even when there is room (0: no cap).
	max int
	// right aligns numbers.
	right bool
	// middle cuts the column's text in the middle, keeping its end (task
	// names), instead of at its end.
	middle bool
}

// flexRoom is what a table's flexible column keeps before other columns
// are cut.
const flexRoom = 16

// cell is one cell: its text (made safe for the terminal already) and its
// colour.
type cell struct {
	text, color string
}

// table lays rows out in columns that fit sc.width: each column as wide as
// its widest cell, then the flexible column, then the others with a
// minimum, cut (with an ellipsis) until the rows fit. Rows are indented by
// two spaces, columns two apart, and carry no trailing spaces. Without a
// width (a pipe), nothing is cut.
func (sc screen) table(w io.Writer, cols []column, rows [][]cell) {
	const indent, gap = 2, 2
	widths := make([]int, len(cols))
	for i, c := range cols {
		widths[i] = cellWidth(c.title)
		for _, r := range rows {
			widths[i] = max(widths[i], cellWidth(r[i].text))
		}
		if c.max > 0 && sc.width > 0 {
			widths[i] = min(widths[i], max(c.max, cellWidth(c.title)))
		}
	}
	total := func() int {
		t := indent + gap*(len(cols)-1)
		for _, wd := range widths {
			t += wd
		}
		return t
	}
	shrink := func(i, floor int) {
		if over := total() - sc.width; sc.width > 0 && over > 0 && widths[i] > floor {
			widths[i] = max(floor, widths[i]-over)
		}
	}
	for _, flexFloor := range []bool{false, true} {
		for i, c := range cols {
			if c.flex {
				floor := max(c.min, cellWidth(c.title))
				if !flexFloor {
					floor = max(floor, flexRoom)
				}
				shrink(i, floor)
			}
		}
		if !flexFloor {
			for i, c := range cols {
				if !c.flex && c.min > 0 {
					shrink(i, max(c.min, cellWidth(c.title)))
				}
			}
		}
	}
	line := func(cells []cell) {
		var b strings.Builder
		b.WriteString(strings.Repeat(" ", indent))
		last := len(cells) - 1
		for last > 0 && cells[last].text == "" {
			last--
		}
		for i := 0; i <= last; i++ {
			cut := truncate
			if cols[i].middle {
				cut = truncateMiddle
			}
			text := cut(cells[i].text, widths[i])
			pad := strings.Repeat(" ", widths[i]-cellWidth(text))
			if cols[i].right {
				b.WriteString(pad)
			}
			b.WriteString(sc.paint(cells[i].color, text))
			if i < last {
				if !cols[i].right {
					b.WriteString(pad)
				}
				b.WriteString(strings.Repeat(" ", gap))
			}
		}
		fmt.Fprintln(w, b.String())
	}
	titles := make([]cell, len(cols))
	for i, c := range cols {
		titles[i] = cell{text: c.title}
	}
	line(titles)
	for _, r := range rows {
		line(r)
	}
}

// shellQuote shows a command line as a POSIX shell would need it typed:
// plain words as they are, others in single quotes, and words with a
// character that does not print in bash's $'...' with escapes, so nothing
// from the state root reaches the terminal raw.
func shellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = shellWord(a)
	}
	return strings.Join(out, " ")
}

func shellWord(s string) string {
	if s == "" {
		return "''"
	}
	plain := true
	for _, r := range s {
		if !(r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%_+=:,./-", r))) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	if printable(s) && !strings.ContainsRune(s, '\u00a0') {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\'' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == ' ' || unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	b.WriteString("'")
	return b.String()
}

// shortDuration shows a duration in at most two units: 850ms, 4.2s, 2m10s,
// 3h04m, 2d03h.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// clock shows a time compactly, in local time: the time of day if it is
// today, with the day if it is this year, else the date.
func clock(t, now time.Time) string {
	t, now = t.Local(), now.Local()
	switch {
	case t.Year() == now.Year() && t.YearDay() == now.YearDay():
		return t.Format("15:04:05")
	case t.Year() == now.Year():
		return t.Format("Jan 02 15:04")
	}
	return t.Format("2006-01-02")
}
