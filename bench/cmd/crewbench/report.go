package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// report is the Markdown the harness prints: streamed to stdout as each
// scenario finishes, and kept whole for -o.
type report struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (r *report) write(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf.WriteString(s)
	os.Stdout.WriteString(s)
}

func (r *report) heading(level int, s string) {
	r.write("\n" + strings.Repeat("#", level) + " " + s + "\n\n")
}

func (r *report) para(s string) { r.write(s + "\n\n") }

// note is a paragraph in italics-free plain text, prefixed to stand out.
func (r *report) note(s string) { r.write("> " + strings.ReplaceAll(s, "\n", "\n> ") + "\n\n") }

func (r *report) table(header []string, rows [][]string) {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(header)) + "\n")
	for _, row := range rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	b.WriteString("\n")
	r.write(b.String())
}

func (r *report) code(s string) {
	r.write("```\n" + strings.TrimRight(s, "\n") + "\n```\n\n")
}

func (r *report) flush(path string) error {
	if path == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return os.WriteFile(path, []byte(r.buf.String()), 0o644)
}

// ms formats a duration in milliseconds with sensible precision.
func ms(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	f := float64(d) / float64(time.Millisecond)
	switch {
	case f < 1:
		return fmt.Sprintf("%.3f ms", f)
	case f < 100:
		return fmt.Sprintf("%.2f ms", f)
	default:
		return fmt.Sprintf("%.0f ms", f)
	}
}

func us(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}
