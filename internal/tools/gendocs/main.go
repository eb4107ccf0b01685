// Command gendocs writes crew's command reference (docs/commands/, in
// markdown) and its man pages (docs/man/, section 1) with
// github.com/spf13/cobra/doc. `make docs` runs it; a test fails when the
// committed files differ from what it writes.
//
// It is a program of its own so that cobra/doc (and the markdown and roff
// code it brings) is never linked into crew. It learns the command tree
// from the crew binary it is given, through the hidden `crew __commands`,
// so the reference shows exactly the commands and flags that build shows
// in --help: make docs gives it the local build, whose help hides the
// etcd store's flags.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/cmddoc"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
)

func main() {
	crew := flag.String("crew", "bin/crew", "the crew binary whose commands are documented")
	out := flag.String("out", "docs", "the directory that gets commands/ and man/")
	flag.Parse()
	if err := generate(*crew, *out); err != nil {
		fmt.Fprintf(os.Stderr, "gendocs: %v\n", err)
		os.Exit(1)
	}
}

// Where the generated files go, under the output directory.
const (
	markdownDir = "commands"
	manDir      = "man"
)

// manDate is the date the man pages carry. It is fixed, not today's, so
// that regenerating unchanged commands changes no file; change it when
// the commands change in a release.
var manDate = time.Date(2026, time.December, 1, 0, 0, 0, 0, time.UTC)

// generate writes the markdown reference and the man pages of crew's
// commands under out, replacing what an earlier run wrote there.
func generate(crew, out string) error {
	tree, err := readTree(crew)
	if err != nil {
		return err
	}
	md := filepath.Join(out, markdownDir)
	if err := resetDir(md, ".md"); err != nil {
		return err
	}
	if err := doc.GenMarkdownTree(rebuild(tree), md); err != nil {
		return fmt.Errorf("write the command reference in %s: %w", md, err)
	}
	man := filepath.Join(out, manDir)
	if err := resetDir(man, ".1"); err != nil {
		return err
	}
	header := &doc.GenManHeader{Title: "CREW", Section: "1", Date: &manDate, Source: "crew", Manual: "crew manual"}
	if err := doc.GenManTree(rebuild(tree), header, man); err != nil {
		return fmt.Errorf("write the man pages in %s: %w", man, err)
	}
	return nil
}

// readTree asks crew for its command tree.
func readTree(crew string) (cmddoc.Command, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(crew, "__commands")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return cmddoc.Command{}, fmt.Errorf("%s __commands: %w: %s", crew, err, strings.TrimSpace(stderr.String()))
	}
	var tree cmddoc.Command
	if err := json.Unmarshal(stdout.Bytes(), &tree); err != nil {
		return cmddoc.Command{}, fmt.Errorf("%s __commands printed no command tree: %w", crew, err)
	}
	return tree, nil
}

// resetDir makes dir exist and hold no file ending in ext, so that a
// command that is gone leaves no page behind.
func resetDir(dir, ext string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	old, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("remove the old page %s: %w", f, err)
		}
	}
	return nil
}

// rebuild puts the command tree back together as cobra commands that
// cobra/doc can document: the same names, texts and flags, with no code
// behind them.
func rebuild(d cmddoc.Command) *cobra.Command {
	c := &cobra.Command{Use: d.Use, Short: d.Short, Long: d.Long, Example: d.Example, DisableAutoGenTag: true}
	if d.Runnable {
		c.Run = func(*cobra.Command, []string) {}
	}
	addFlags(c.Flags(), d.Flags)
	addFlags(c.PersistentFlags(), d.PersistentFlags)
	for _, sub := range d.Commands {
		c.AddCommand(rebuild(sub))
	}
	return c
}

// addFlags adds flags to fs. pflag's own types are used where crew used
// them, because pflag decides by a flag's Go type whether its default is
// worth showing; crew's own types (durations, sizes) are shown as pflag
// shows any other type.
func addFlags(fs *pflag.FlagSet, flags []cmddoc.Flag) {
	for _, d := range flags {
		switch d.Type {
		case "bool":
			fs.BoolP(d.Name, d.Shorthand, false, d.Usage)
		case "int":
			fs.IntP(d.Name, d.Shorthand, 0, d.Usage)
		case "string":
			fs.StringP(d.Name, d.Shorthand, "", d.Usage)
		case "stringArray":
			fs.StringArrayP(d.Name, d.Shorthand, nil, d.Usage)
		default:
			fs.VarP(&docValue{typ: d.Type, value: d.Default}, d.Name, d.Shorthand, d.Usage)
		}
		f := fs.Lookup(d.Name)
		f.DefValue, f.NoOptDefVal = d.Default, d.NoOptDefault
	}
}

// docValue is a flag's value of a type of crew's own: only its name and
// its default are known.
type docValue struct{ typ, value string }

func (v *docValue) String() string     { return v.value }
func (v *docValue) Set(s string) error { v.value = s; return nil }
func (v *docValue) Type() string       { return v.typ }
