package codeshape

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// No type of crew's grows into a god-type (runstore.Store once had 145
// methods in 20 files, dispatch.Dispatcher 72), and no function past a
// page (issue 22): a concept that needs more gets a type or a package of
// its own.
const (
	maxMethods   = 40
	maxFuncLines = 80
)

// trees are the directories, from the repository's root, whose Go code
// (tests aside) is held to the limits: the commands, the packages, the
// benchmark harness.
var trees = []string{"cmd", "internal", "bench"}

func TestNoGodTypesNoLongFunctions(t *testing.T) {
	methods := map[string]int{} // "dir.Type"
	for _, tree := range trees {
		err := filepath.WalkDir(filepath.Join("..", "..", tree), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			checkFile(t, path, methods)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for typ, n := range methods {
		if n > maxMethods {
			t.Errorf("type %s has %d methods, more than %d", typ, n, maxMethods)
		}
	}
	if len(methods) < 50 {
		t.Errorf("only %d types with methods found: are the trees %v where this test looks?", len(methods), trees)
	}
}

// checkFile checks the functions of one file and counts its methods.
func checkFile(t *testing.T, path string, methods map[string]int) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
			t.Errorf("%s: func %s is %d lines, more than %d", fset.Position(fn.Pos()), fn.Name.Name, n, maxFuncLines)
		}
		if fn.Recv != nil {
			methods[filepath.Dir(path)+"."+receiverType(fn.Recv.List[0].Type)]++
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
