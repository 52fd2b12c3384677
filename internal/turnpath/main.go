// Command turnpath follows one message through a package by its static
// calls (type-checked: only functions and methods declared in the
// package), depth first from a root, and counts the files it visits and
// the times it comes back to a file it had left. It measures whether the
// turn path's files follow a turn:
//
//	go run ./internal/turnpath -only Manager -v ./sessions Manager.Submit
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	onlyFlag := flag.String("only", "", "follow only methods of these receiver types (comma-separated)")
	verboseFlag := flag.Bool("v", false, "print each stop")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: turnpath [-only Type,...] [-v] DIR Type.Method")
		os.Exit(2)
	}
	dir, root, verbose := flag.Arg(0), flag.Arg(1), *verboseFlag
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	var afs []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			panic(err)
		}
		afs = append(afs, af)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil), Error: func(error) {}}
	pkg, _ := conf.Check("sessions", fset, afs, info)
	type fn struct {
		file  string
		name  string
		calls []*types.Func
	}
	fns := map[*types.Func]*fn{}
	var rootFn *types.Func
	for _, af := range afs {
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			obj, _ := info.Defs[fd.Name].(*types.Func)
			if obj == nil {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil {
				t := fd.Recv.List[0].Type
				if s, ok := t.(*ast.StarExpr); ok {
					t = s.X
				}
				if id, ok := t.(*ast.Ident); ok {
					name = id.Name + "." + name
				}
			}
			x := &fn{file: filepath.Base(fset.Position(fd.Pos()).Filename), name: name}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				var id *ast.Ident
				switch e := c.Fun.(type) {
				case *ast.Ident:
					id = e
				case *ast.SelectorExpr:
					id = e.Sel
				}
				if id == nil {
					return true
				}
				if f, ok := info.Uses[id].(*types.Func); ok && f.Pkg() == pkg {
					x.calls = append(x.calls, f)
				}
				return true
			})
			fns[obj] = x
			if name == root {
				rootFn = obj
			}
		}
	}
	seen := map[*types.Func]bool{}
	var seq []string
	var walk func(*types.Func)
	walk = func(f *types.Func) {
		x, ok := fns[f]
		if !ok || seen[f] {
			return
		}
		if only := *onlyFlag; only != "" {
			keep := false
			for _, p := range strings.Split(only, ",") {
				if strings.HasPrefix(x.name, p+".") {
					keep = true
				}
			}
			if !keep {
				return
			}
		}
		seen[f] = true
		seq = append(seq, x.file+" "+x.name)
		for _, c := range x.calls {
			if _, ok := fns[c]; ok && !seen[c] {
				n := len(seq)
				walk(c)
				if len(seq) > n {
					seq = append(seq, x.file+" "+x.name)
				}
			}
		}
	}
	walk(rootFn)
	stops, back := 0, 0
	left := map[string]bool{}
	cur := ""
	visited := map[string]bool{}
	for _, s := range seq {
		file := s[:strings.Index(s, " ")]
		if file == cur {
			continue
		}
		stops++
		mark := ""
		if left[file] {
			back++
			mark = "  (back)"
		}
		if verbose {
			fmt.Println(s + mark)
		}
		if cur != "" {
			left[cur] = true
		}
		cur = file
		visited[file] = true
	}
	var names []string
	for f := range visited {
		names = append(names, f)
	}
	sort.Strings(names)
	fmt.Printf("functions %d, stops %d in %d files, %d back in a file already left\n", len(seen), stops, len(visited), back)
	fmt.Println(names)
}
