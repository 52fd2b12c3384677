package tooltest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// DecisionErrors are the errors sessions.Manager.DecideTool names, read
// from the sessions package's source: the var block documented "Errors of
// DecideTool", and every sessions Err… its body returns. The map is their
// names to their messages (each is an errors.New), for a channel's test
// to check that its table answers every one of them: a new decision error
// that a channel does not map fails that test, not a user.
func DecisionErrors(t testing.TB) map[string]string {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("tooltest: no source path")
	}
	dir := filepath.Join(filepath.Dir(self), "..", "..", "sessions")
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	messages := map[string]string{} // every package-level Err… = errors.New("…")
	named := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				block := d.Tok == token.VAR && d.Doc != nil && strings.HasPrefix(d.Doc.Text(), "Errors of DecideTool")
				for _, spec := range d.Specs {
					vs, ok := spec.(*ast.ValueSpec)
					if !ok {
						continue
					}
					for i, name := range vs.Names {
						if !strings.HasPrefix(name.Name, "Err") || i >= len(vs.Values) {
							continue
						}
						if msg, ok := errorsNew(vs.Values[i]); ok {
							messages[name.Name] = msg
						}
						if block {
							named[name.Name] = true
						}
					}
				}
			case *ast.FuncDecl:
				if d.Name.Name != "DecideTool" || d.Recv == nil || d.Body == nil {
					continue
				}
				ast.Inspect(d.Body, func(n ast.Node) bool {
					if r, ok := n.(*ast.ReturnStmt); ok {
						for _, v := range r.Results {
							if id, ok := v.(*ast.Ident); ok && strings.HasPrefix(id.Name, "Err") {
								named[id.Name] = true
							}
						}
					}
					return true
				})
			}
		}
	}
	if len(named) == 0 {
		t.Fatal("tooltest: found no errors of DecideTool in package sessions")
	}
	out := map[string]string{}
	for name := range named {
		msg, ok := messages[name]
		if !ok {
			t.Fatalf("tooltest: sessions.%s is not an errors.New of package sessions", name)
		}
		out[name] = msg
	}
	return out
}

// errorsNew is the message of errors.New("…").
func errorsNew(e ast.Expr) (string, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "New" {
		return "", false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "errors" {
		return "", false
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	msg, err := strconv.Unquote(lit.Value)
	return msg, err == nil
}
