package main

import (
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"wait", "wait", 0},
		{"wiat", "wait", 1}, // swapped letters: one edit
		{"limt", "limit", 1},
		{"timeuot", "timeout", 1},
		{"jsno", "json", 1},
		{"", "tag", 3},
		{"grace", "", 5},
		{"forse", "force", 1},
		{"ab", "ba", 1},
		{"abc", "cab", 2},
		{"décor", "decor", 1}, // letters, not bytes
	} {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// Only a near flag is suggested: a typo, a flag's beginning, or its name
// with one dash; a word far from every flag gets no guess.
func TestNearestFlags(t *testing.T) {
	fs := pflag.NewFlagSet("start", pflag.ContinueOnError)
	for _, name := range []string{"wait", "pool", "timeout", "tag", "retries", "retry-delay", "json", "store"} {
		fs.Bool(name, false, "")
	}
	_ = fs.MarkHidden("store")
	for _, c := range []struct {
		typed string
		want  []string
	}{
		{"wiat", []string{"--wait"}},
		{"WAIT", []string{"--wait"}},
		{"time", []string{"--timeout"}},
		{"retr", []string{"--retries", "--retry-delay"}},
		{"jsno", []string{"--json"}},
		{"stor", nil}, // hidden: not offered
		{"nightly", nil},
		{"x", nil},
		{"j2", nil},
	} {
		if got := nearestFlags(fs, c.typed); !slices.Equal(got, c.want) {
			t.Errorf("nearestFlags(%q) = %q, want %q", c.typed, got, c.want)
		}
	}
}
