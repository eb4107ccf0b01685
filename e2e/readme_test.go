package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"
)

// readme is the README's text.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	return string(b)
}

// readmeBlock is the first fenced code block of the README after the
// heading line heading, without its fences.
func readmeBlock(t *testing.T, heading string) string {
	t.Helper()
	text := readme(t)
	i := strings.Index(text, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "the README has no heading %q", heading)
	m := regexp.MustCompile("(?s)\n```[a-z]*\n(.*?)\n```\n").FindStringSubmatch(text[i:])
	require.NotNil(t, m, "no code block after the README's %q", heading)
	return m[1]
}

// The README is a page, not the reference: at most 300 lines.
func TestReadmeIsShort(t *testing.T) {
	lines := strings.Count(readme(t), "\n")
	require.LessOrEqual(t, lines, 300, "README.md has %d lines; the reference goes in docs/", lines)
}

// The README's set-up is the two commands, its test command is what CI
// runs (.ci/run), and the Go it names is go.mod's.
func TestReadmeSetUp(t *testing.T) {
	setUp := strings.Split(readmeBlock(t, "## Set-up"), "\n")
	require.Equal(t, []string{"go run ./cmd/crew start hello -- echo hello", "make test"}, setUp)

	ci, err := os.ReadFile("../.ci/run")
	require.NoError(t, err)
	var commands []string
	for _, l := range strings.Split(string(ci), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "set ") && !strings.HasPrefix(l, "cd ") {
			commands = append(commands, l)
		}
	}
	require.Equal(t, []string{setUp[1]}, commands, ".ci/run runs exactly the README's test command")

	mod, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	goLine := regexp.MustCompile(`(?m)^go [0-9.]+$`).FindString(string(mod))
	require.NotEmpty(t, goLine)
	require.Contains(t, readme(t), "`"+goLine+"`", "the README names the Go go.mod needs")
}

// The README's CI recipe, run as written: with crew on PATH and a state
// root of the test's (CREW_ROOT) and a CI job's id (CI_JOB_ID), in a
// directory whose ./run-tests.sh passes, then fails.
func TestReadmeCIRecipe(t *testing.T) {
	recipe := readmeBlock(t, "### CI")
	e := newEnv(t)
	bin := filepath.Join(e.dir, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o700))
	require.NoError(t, os.Symlink(crewBin, filepath.Join(bin, "crew")))
	script := filepath.Join(e.dir, "recipe.sh")
	require.NoError(t, os.WriteFile(script, []byte(recipe+"\n"), 0o600))
	path := "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")

	run := func(suite string) (string, int) {
		require.NoError(t, os.WriteFile(filepath.Join(e.dir, "run-tests.sh"), []byte("#!/bin/sh\n"+suite+"\n"), 0o700))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", script)
		cmd.Dir, cmd.Env = e.dir, e.environ(path, "CI_JOB_ID=4711")
		out, err := cmd.CombinedOutput()
		code := 0
		if err != nil {
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			code = exit.ExitCode()
		}
		return string(out), code
	}

	out, code := run("echo all green")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "tests-4711\tall green\n", "--tag tags the suite's lines")
	require.Contains(t, out, "ci: tests passed\n")
	require.Regexp(t, `(?m)^ *[0-9a-f]{8} +succeeded +0 `, out, "crew history lists the run")

	out, code = run("echo 1 failure; exit 3")
	require.Equal(t, 3, code, "the recipe exits with the suite's code\n%s", out)
	require.Contains(t, out, "crew: tests-4711: attempt 2 of 2 after exit 3", "--retries 1 ran it again")
	require.Contains(t, out, "ci: tests failed (exit 3)\n")
	require.Regexp(t, `(?m)^ *[0-9a-f]{8} +failed +3 `, out, "crew history lists the failed run")
}

// Every relative link of the README and of docs/ names a file that
// exists and, with #anchor, a heading of it: the reference moved out of
// the README, and its links with it.
func TestDocsLinksResolve(t *testing.T) {
	files, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	commands, err := filepath.Glob("../docs/commands/*.md")
	require.NoError(t, err)
	files = append(append(files, commands...), "../README.md")
	fence := regexp.MustCompile("(?s)```.*?```")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			to := f
			if path != "" {
				to = filepath.Join(filepath.Dir(f), path)
			}
			if _, err := os.Stat(to); err != nil {
				t.Errorf("%s links to %s, which does not exist", f, target)
				continue
			}
			if anchor != "" && !slices.Contains(headingAnchors(t, to), anchor) {
				t.Errorf("%s links to %s: %s has no heading with that anchor", f, target, to)
			}
		}
	}
}

// headingAnchors is the anchors GitHub gives the headings of a markdown
// file: lower case, punctuation dropped, spaces made dashes.
func headingAnchors(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var out []string
	inFence := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
		}
		h, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " ")
		if inFence || !ok || !strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				return unicode.ToLower(r)
			}
			return -1
		}, strings.TrimSpace(h)))
	}
	return out
}
