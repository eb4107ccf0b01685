package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// The table of docs/exit-codes.md lists every exit code crew has, and
// no other: the codes declared here (exitcode.go) and the run outcome
// codes of internal/vocab, read from their source so that a code added
// to either fails this test until the table has it.
func TestExitCodeTableMatchesTheCode(t *testing.T) {
	vocabCodes := intConsts(t, "../../internal/vocab/outcome.go", "Exit", nil)
	documented := exitCodeTable(t, "../../docs/exit-codes.md")
	var want []int
	for _, consts := range []map[string]int{intConsts(t, "exitcode.go", "exit", vocabCodes), vocabCodes} {
		for _, c := range consts {
			if c != exitOK && !slices.Contains(want, c) { // 0 is the command's own: the table's 0–255 row
				want = append(want, c)
			}
		}
	}
	slices.Sort(want)
	for _, c := range want {
		if !slices.Contains(documented, c) {
			t.Errorf("exit code %d is not in docs/exit-codes.md's table", c)
		}
	}
	for _, c := range documented {
		if !slices.Contains(want, c) {
			t.Errorf("docs/exit-codes.md's table lists exit code %d, which crew does not have", c)
		}
	}
}

// intConsts is the value of every constant declared in file whose name
// begins with prefix: an integer literal, or a constant of another
// package's (pkg.Name) found in others.
func intConsts(t *testing.T, file, prefix string, others map[string]int) map[string]int {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !regexp.MustCompile("^"+prefix+"[A-Z]").MatchString(name.Name) || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					continue // a text about the codes (exitCodeHelp)
				}
				out[name.Name] = constValue(t, file, name.Name, vs.Values[i], others)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s... constants in %s", prefix, file)
	}
	return out
}

func constValue(t *testing.T, file, name string, e ast.Expr, others map[string]int) int {
	t.Helper()
	switch v := e.(type) {
	case *ast.BasicLit:
		n, err := strconv.Atoi(v.Value)
		if err == nil {
			return n
		}
	case *ast.SelectorExpr:
		if n, ok := others[v.Sel.Name]; ok {
			return n
		}
	}
	t.Fatalf("%s: cannot read the value of %s", file, name)
	return 0
}

// exitCodeTable is the codes of the table's rows (`| 64 | ... |`), in
// order; a range (0–255, the command's own code) is no code of crew's.
func exitCodeTable(t *testing.T, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var codes []int
	for _, m := range regexp.MustCompile(`(?m)^\| *([0-9]+) *\|`).FindAllStringSubmatch(string(b), -1) {
		n, _ := strconv.Atoi(m[1])
		if slices.Contains(codes, n) {
			t.Errorf("%s lists exit code %d twice", file, n)
		}
		codes = append(codes, n)
	}
	if len(codes) == 0 {
		t.Fatalf("no table of exit codes in %s", file)
	}
	slices.Sort(codes)
	return codes
}
