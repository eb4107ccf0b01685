package e2e

// Help that fits (issue 24, item 4): every command's --help is a short
// summary, examples and the flags, every line under 100 columns, and
// lists no flag this build refuses.

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// subcommands lists the commands a --help output names under "Available
// Commands:".
func subcommands(help string) []string {
	_, list, found := strings.Cut(help, "Available Commands:\n")
	if !found {
		return nil
	}
	var names []string
	for _, l := range strings.Split(list, "\n") {
		if !strings.HasPrefix(l, "  ") {
			break
		}
		names = append(names, strings.Fields(l)[0])
	}
	return names
}

var flagLine = regexp.MustCompile(`^\s+(-\w, )?--([a-z-]+)`)

func TestEveryHelpFitsAndListsOnlyWhatThisBuildHas(t *testing.T) {
	e := newEnv(t)
	seen := 0
	var walk func(path []string)
	walk = func(path []string) {
		r := e.run(append(append([]string{}, path...), "--help")...)
		require.Equal(t, 0, r.Code, "%v --help: %s", path, r.Stderr)
		name := strings.Join(append([]string{"crew"}, path...), " ")
		seen++
		for _, l := range strings.Split(r.Stdout, "\n") {
			assert.Less(t, utf8.RuneCountInString(l), 100, "%s --help: a line of 100 columns or more:\n%s", name, l)
			if m := flagLine.FindStringSubmatch(l); m != nil {
				assert.NotContains(t, []string{"store", "lease-ttl"}, m[2], "%s --help lists an etcd-only flag in a crew without etcd", name)
			}
		}
		for _, sub := range subcommands(r.Stdout) {
			if sub != "help" {
				walk(append(append([]string{}, path...), sub))
			}
		}
	}
	walk(nil)
	assert.GreaterOrEqual(t, seen, 14, "crew, its 10 commands, completion's shells")

	// crew start's is a summary, examples and the flags: the prose before
	// "Usage:" is short, the flags' descriptions wrapped.
	r := e.run("start", "--help")
	prose, _, found := strings.Cut(r.Stdout, "\nUsage:")
	require.True(t, found, r.Stdout)
	assert.LessOrEqual(t, strings.Count(prose, "\n"), 12, "the summary before Usage:\n%s", prose)
	assert.LessOrEqual(t, strings.Count(r.Stdout, "\n"), 70, "crew start --help:\n%s", r.Stdout)
	assert.Contains(t, r.Stdout, "Examples:\n  crew start build -- make -j2\n")
	assert.Regexp(t, `\n      --wait duration\[=forever\] +wait in line for a slot instead of refusing; --wait=D \(with\n +"="\) gives up`, r.Stdout,
		"a long description goes on, indented, on the next line")
}
