package runstore

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The state root is kept by runstore and the packages it hands parts of
// the root to, each by concept (issue 22): none of their types may grow
// into the god-type runstore.Store once was (145 methods in 20 files), nor
// any function past a page.
const (
	maxMethods   = 40
	maxFuncLines = 80
)

// stateRootPackages are the directories (beside this one) of those
// packages.
var stateRootPackages = []string{"runstore", "finishindex", "runlog", "queue", "stateroot", "storetest"}

func TestStateRootPackagesStaySplit(t *testing.T) {
	for _, pkg := range stateRootPackages {
		dir := filepath.Join("..", pkg)
		fset := token.NewFileSet()
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(names) == 0 {
			t.Errorf("package %s: no Go files in %s (%v)", pkg, dir, err)
			continue
		}
		methods := map[string]int{}
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(fset, name, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
					t.Errorf("%s: func %s is %d lines, more than %d", fset.Position(fn.Pos()), fn.Name.Name, n, maxFuncLines)
				}
				if fn.Recv != nil {
					methods[receiverType(fn.Recv.List[0].Type)]++
				}
			}
		}
		for typ, n := range methods {
			if n > maxMethods {
				t.Errorf("package %s: type %s has %d methods, more than %d", pkg, typ, n, maxMethods)
			}
		}
	}
}

// receiverType is the name of a method's receiver type, without its
// pointer or type parameters.
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return "?"
		}
	}
}
