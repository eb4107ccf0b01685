package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"
)

// repoRoot is the module's root, from this package's directory.
const repoRoot = "../../.."

// crewBin is the local crew (no build tags, as make docs uses), built
// once by TestMain.
var crewBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gendocs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	crewBin = filepath.Join(dir, "crew")
	cmd := exec.Command("go", "build", "-o", crewBin, "./cmd/crew")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build crew: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildCrew(*testing.T) string { return crewBin }

// The commands gendocs puts back together show their flags exactly as
// crew's own --help does (the same wrapping, types and defaults), so the
// reference says what the binary says.
func TestRebuiltFlagsReadAsCrewHelp(t *testing.T) {
	tree, err := readTree(crewBin)
	if err != nil {
		t.Fatal(err)
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		args := append(strings.Fields(c.CommandPath())[1:], "--help")
		out, err := exec.Command(crewBin, args...).Output()
		if err != nil {
			t.Fatalf("crew %s: %v", strings.Join(args, " "), err)
		}
		for title, flags := range map[string]interface{ FlagUsagesWrapped(int) string }{
			"Flags:":        c.LocalFlags(),
			"Global Flags:": c.InheritedFlags(),
		} {
			usage := strings.TrimRightFunc(flags.FlagUsagesWrapped(99), unicode.IsSpace)
			if usage != "" && !strings.Contains(string(out), title+"\n"+usage+"\n") {
				t.Errorf("%s: the reference's %s\n%s\nis not crew --help's:\n%s", c.CommandPath(), title, usage, out)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rebuild(tree))
}

// The committed command reference and man pages are what gendocs writes
// from today's commands, file for file.
func TestGeneratedDocsAreCurrent(t *testing.T) {
	out := t.TempDir()
	if err := generate(buildCrew(t), out); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{markdownDir, manDir} {
		want := readDir(t, filepath.Join(out, dir))
		got := readDir(t, filepath.Join(repoRoot, "docs", dir))
		for name, w := range want {
			g, ok := got[name]
			switch {
			case !ok:
				t.Errorf("docs/%s/%s is missing: run make docs", dir, name)
			case g != w:
				t.Errorf("docs/%s/%s is stale: run make docs", dir, name)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("docs/%s/%s documents no command of crew's: run make docs", dir, name)
			}
		}
	}
}

// readDir is every file of dir, by name.
func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(b)
	}
	return files
}

// The reference covers every command crew's help lists, and no hidden
// one (a detached run's supervisor, the tree's own dump).
func TestGeneratedDocsCoverTheCommands(t *testing.T) {
	out := t.TempDir()
	if err := generate(buildCrew(t), out); err != nil {
		t.Fatal(err)
	}
	var pages []string
	for name := range readDir(t, filepath.Join(out, manDir)) {
		pages = append(pages, name)
	}
	slices.Sort(pages)
	for _, want := range []string{"crew.1", "crew-start.1", "crew-status.1", "crew-history.1", "crew-init.1",
		"crew-recover.1", "crew-wait.1", "crew-logs.1", "crew-stop.1", "crew-prune.1", "crew-completion.1"} {
		if !slices.Contains(pages, want) {
			t.Errorf("no man page %s among %v", want, pages)
		}
	}
	for _, p := range pages {
		if p == "crew-__supervise.1" || p == "crew-__commands.1" {
			t.Errorf("a hidden command has a man page: %s", p)
		}
	}
}

// make install puts crew and every man page where PREFIX and DESTDIR say.
func TestMakeInstallInstallsManPages(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	dest := t.TempDir()
	bin := filepath.Join(t.TempDir(), "crew")
	cmd := exec.Command("make", "install", "DESTDIR="+dest, "PREFIX=/opt/crew", "BIN="+bin)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(dest, "opt/crew/bin/crew")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("crew not installed as an executable in DESTDIR/PREFIX/bin: %v", err)
	}
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", manDir, "*.1"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no man pages in docs/man: %v", err)
	}
	for _, p := range pages {
		if _, err := os.Stat(filepath.Join(dest, "opt/crew/share/man/man1", filepath.Base(p))); err != nil {
			t.Errorf("man page not installed: %v", err)
		}
	}
}
