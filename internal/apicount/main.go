// Command apicount counts the exported API of cronlock's library packages and fails when a
// package exports more than its target, or a name that its users cannot find.
//
//	go run ./internal/apicount [-root DIR]
//
// A package's count is its exported top-level names (functions, types, variables, constants)
// plus the exported methods of its exported types, read with go/parser from its non-test Go
// files (no build, no type check). Fields are not counted.
//
// Each package has a target, the most names its API may have: a change that adds a name to a
// package at its target must remove one, or move one under internal/.
//
// Every exported name must also appear in the package's API table (the "# API at a glance"
// section of its doc.go) and in the user's documentation: README.md, docs/, examples/, or the
// package's example*_test.go files. A method T.M counts as named where T.M is, or both T and M
// are, as whole words.
package main

import (
	"errors"
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
}

// budgets are the library packages' budgets.
var budgets = []budget{
	{dir: "redlock", target: 60},
	{dir: "middleware", target: 30},
	{dir: "scheduler", target: 45},
	{dir: "job", target: 30},
}

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if !check(os.Stdout, os.DirFS(*root), budgets) {
		os.Exit(1)
	}
}

// check prints each package's count beside its target to w, and the names that its
// API table or the user's documentation leaves out (undocumented); it reports whether every
// package is within its target and every name documented.
func check(w io.Writer, fsys fs.FS, budgets []budget) bool {
	ok := true
	for _, b := range budgets {
		list, err := names(fsys, b.dir)
		if err == nil {
			var missing []string
			missing, err = undocumented(fsys, b.dir, list)
			for _, m := range missing {
				fmt.Fprintf(w, "%s: %s\n", b.dir, m)
				ok = false
			}
		}
		n := len(list)
		switch {
		case err != nil:
			fmt.Fprintf(w, "%s: %v\n", b.dir, err)
			ok = false
		case n > b.target:
			fmt.Fprintf(w, "%-11s %3d exported, target %3d: FAIL, remove %d exported names (or move them under internal/)\n",
				b.dir, n, b.target, n-b.target)
			ok = false
		default:
			fmt.Fprintf(w, "%-11s %3d exported, target %3d\n", b.dir, n, b.target)
		}
	}
	return ok
}

// interfaceMethods are methods that satisfy a standard interface (error, errors.Is,
// fmt.Stringer): they need no place in the documentation of their own.
var interfaceMethods = []string{"Error", "Unwrap", "Is", "String"}

// undocumented returns a line for each of list (names of dir) that is missing from the
// package's API table (the "API at a glance" section of dir/doc.go), and for each that no
// user documentation names: README.md, docs/, examples/ and dir's example*_test.go files. A
// method "T.M" is named as T.M, or by both T and M (a table's "Job (Validate)").
func undocumented(fsys fs.FS, dir string, list []string) ([]string, error) {
	doc, err := fs.ReadFile(fsys, filepath.ToSlash(filepath.Join(dir, "doc.go")))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	_, table, found := strings.Cut(string(doc), "# API at a glance")
	if !found {
		return []string{"doc.go has no \"# API at a glance\" section: add one, a table of every exported name by task"}, nil
	}
	user, err := userDocs(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range list {
		typ, method, isMethod := strings.Cut(name, ".")
		if isMethod && slices.Contains(interfaceMethods, method) {
			continue
		}
		named := func(text string) bool {
			return containsWord(text, name) || isMethod && containsWord(text, method) && containsWord(text, typ)
		}
		if !named(table) {
			out = append(out, name+": not in the API table of doc.go: add it under its task")
		}
		if !named(user) {
			out = append(out, name+": named by no example, README.md or docs/ page: show users what it is for, or unexport it")
		}
	}
	return out, nil
}

// userDocs returns the text of the user's documentation of the package in dir: README.md,
// the files under docs/ and examples/, and dir's example*_test.go files.
func userDocs(fsys fs.FS, dir string) (string, error) {
	var b strings.Builder
	add := func(path string) error {
		data, err := fs.ReadFile(fsys, path)
		b.Write(data)
		b.WriteByte('\n')
		return err
	}
	if err := add("README.md"); err != nil {
		return "", err
	}
	for _, root := range []string{"docs", "examples"} {
		err := fs.WalkDir(fsys, root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".md") || strings.HasSuffix(path, ".go")) {
				return err
			}
			return add(path)
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	examples, err := fs.Glob(fsys, filepath.ToSlash(filepath.Join(dir, "example*_test.go")))
	if err != nil {
		return "", err
	}
	for _, path := range examples {
		if err := add(path); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// containsWord reports whether s holds word with no identifier character on either side.
func containsWord(s, word string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], word)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(word)
		if (j == 0 || !isIdent(s[j-1])) && (end == len(s) || !isIdent(s[end])) {
			return true
		}
		i = j + 1
	}
}

func isIdent(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// names returns the exported top-level names and the exported methods of exported types
// ("T.Method") declared in the non-test Go files of dir.
func names(fsys fs.FS, dir string) ([]string, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var out []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := fs.ReadFile(fsys, filepath.ToSlash(filepath.Join(dir, name)))
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), src, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		out = append(out, fileNames(f)...)
	}
	return out, nil
}

// fileNames returns the exported top-level names and the exported methods of exported types
// ("T.Method") declared in f.
func fileNames(f *ast.File) []string {
	var out []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				out = append(out, d.Name.Name)
			} else if recv, ok := receiverName(d.Recv.List[0].Type); ok {
				out = append(out, recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						out = append(out, s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.IsExported() {
							out = append(out, id.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// receiverName returns the name of a method's receiver type (T, *T, T[P], *T[P]), and
// whether it is exported.
func receiverName(t ast.Expr) (string, bool) {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name, x.IsExported()
		default:
			return "", false
		}
	}
}
