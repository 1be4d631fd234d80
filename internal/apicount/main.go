// Command apicount counts the exported API of cronlock's library packages and fails when a
// package exports more than its limit.
//
//	go run ./internal/apicount [-root DIR]
//
// A package's count is its exported top-level names (functions, types, variables, constants)
// plus the exported methods of its exported types, read with go/parser from its non-test Go
// files (no build, no type check). Fields are not counted.
//
// Each package has a target, the size its API should have, and a limit, the count the check
// enforces. The limit is a ratchet: the lower of the target and the count when the table was
// last lowered. A change that removes names lowers the limit beside it; a change that adds
// names must remove as many, until every limit reaches its target. The output prints both.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// budget is the exported API one package may have.
type budget struct {
	dir    string // the package's directory, from the repository's root
	target int    // the size its API should have
	limit  int    // what the check enforces: at most target, lowered as names are removed
}

// budgets are the library packages' budgets. Lower a limit when a change removes names;
// never raise one above its target.
var budgets = []budget{
	{dir: "redlock", target: 60, limit: 95},
	{dir: "middleware", target: 30, limit: 43},
	{dir: "scheduler", target: 45, limit: 75},
	{dir: "job", target: 30, limit: 36},
}

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if !check(os.Stdout, os.DirFS(*root), budgets) {
		os.Exit(1)
	}
}

// check prints each package's count beside its limit and target to w, and reports whether
// every package is within its limit.
func check(w io.Writer, fsys fs.FS, budgets []budget) bool {
	ok := true
	for _, b := range budgets {
		n, err := count(fsys, b.dir)
		switch {
		case err != nil:
			fmt.Fprintf(w, "%s: %v\n", b.dir, err)
			ok = false
		case n > b.limit:
			fmt.Fprintf(w, "%-11s %3d exported, limit %3d, target %3d: FAIL, remove %d exported names (or move them under internal/)\n",
				b.dir, n, b.limit, b.target, n-b.limit)
			ok = false
		default:
			fmt.Fprintf(w, "%-11s %3d exported, limit %3d, target %3d\n", b.dir, n, b.limit, b.target)
		}
	}
	return ok
}

// count returns the number of exported top-level names and exported methods of exported types
// in the non-test Go files of dir.
func count(fsys fs.FS, dir string) (int, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return 0, err
	}
	fset := token.NewFileSet()
	n := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := fs.ReadFile(fsys, filepath.ToSlash(filepath.Join(dir, name)))
		if err != nil {
			return 0, err
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), src, parser.SkipObjectResolution)
		if err != nil {
			return 0, err
		}
		n += countFile(f)
	}
	return n, nil
}

// countFile returns the number of exported top-level names and exported methods of exported
// types declared in f.
func countFile(f *ast.File) int {
	n := 0
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil || receiverExported(d.Recv.List[0].Type) {
				n++
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					n += len(slices.DeleteFunc(slices.Clone(s.Names), func(id *ast.Ident) bool { return !id.IsExported() }))
				}
			}
		}
	}
	return n
}

// receiverExported reports whether a method's receiver type (T, *T, T[P], *T[P]) is exported.
func receiverExported(t ast.Expr) bool {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}
