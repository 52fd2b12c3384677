package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// What a channel or the domain can do is said by the types it is built
// with, never found by a type assertion on an anonymous interface
// (x.(interface{ M() })): an optional capability is an exported interface
// checked by name, or part of the interface a channel declares. Driver
// idioms in the store (database/sql's Raw) are the adapters' own.
func TestNoCapabilityFoundByAnonymousInterface(t *testing.T) {
	for _, dir := range []string{"../../gateway", "../../bots/telegram", "../../sessions", "../../agent"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != dir && (d.Name() == "store" || d.Name() == "testdata") {
					return filepath.SkipDir // the adapter, and fixtures
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if ta, ok := n.(*ast.TypeAssertExpr); ok {
					if _, anon := ta.Type.(*ast.InterfaceType); anon {
						t.Errorf("%s: a capability found by a type assertion on an anonymous interface", fset.Position(ta.Pos()))
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The channels' doors are small: no interface that gateway or
// bots/telegram declares has more than 10 methods, counting those of
// the interfaces it embeds.
func TestChannelInterfacesAreSmall(t *testing.T) {
	for _, dir := range []string{"../../gateway", "../../bots/telegram"} {
		fset := token.NewFileSet()
		ifaces := map[string]*ast.InterfaceType{}
		entries, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range entries {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if ts, ok := n.(*ast.TypeSpec); ok {
					if it, ok := ts.Type.(*ast.InterfaceType); ok {
						ifaces[ts.Name.Name] = it
					}
				}
				return true
			})
		}
		var count func(it *ast.InterfaceType) int
		count = func(it *ast.InterfaceType) int {
			n := 0
			for _, m := range it.Methods.List {
				if _, fn := m.Type.(*ast.FuncType); fn {
					n += len(m.Names)
				} else if id, ok := m.Type.(*ast.Ident); ok && ifaces[id.Name] != nil {
					n += count(ifaces[id.Name])
				}
			}
			return n
		}
		if len(ifaces) == 0 {
			t.Fatalf("%s: no interfaces found", dir)
		}
		for name, it := range ifaces {
			if n := count(it); n > 10 {
				t.Errorf("%s: interface %s has %d methods, over 10: split it by role", dir, name, n)
			}
		}
	}
}
