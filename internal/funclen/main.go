// Command funclen lists the functions of the core packages that are longer than a limit and
// whose doc comment gives no reason for it, so that long functions stay a choice, not a drift.
//
//	go run ./internal/funclen [-max 60] [DIR ...]
//
// Without directories it reads redlock, middleware and scheduler under the current directory
// (the repository's root). A function's length counts the lines from its func keyword to its
// closing brace. A function may be longer when its doc comment has a line starting with
// "long:" that says why (e.g. "// long: one switch over the script's reply codes").
// Test files are not read.
//
// Each function too long is printed as FILE:LINE: NAME: N lines, and the exit status is 1.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	limit := flag.Int("max", 60, "the longest function allowed without a reason")
	flag.Parse()
	dirs := flag.Args()
	if len(dirs) == 0 {
		dirs = []string{"redlock", "middleware", "scheduler"}
	}
	var found []string
	for _, dir := range dirs {
		long, err := longFuncs(dir, *limit)
		if err != nil {
			fmt.Fprintln(os.Stderr, "funclen:", err)
			os.Exit(2)
		}
		found = append(found, long...)
	}
	for _, f := range found {
		fmt.Println(f)
	}
	if len(found) > 0 {
		fmt.Printf("funclen: %d functions over %d lines: split them, or say why in a \"// long: …\" line of their doc comment\n", len(found), *limit)
		os.Exit(1)
	}
}

// longFuncs returns the functions of the Go files in dir (tests excepted) longer than limit
// lines without a "long:" reason, one "FILE:LINE: NAME: N lines" each.
func longFuncs(dir string, limit int) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	fset := token.NewFileSet()
	var long []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			if n := end.Line - start.Line + 1; n > limit && !hasReason(fd.Doc) {
				long = append(long, fmt.Sprintf("%s:%d: %s: %d lines", name, start.Line, funcName(fd), n))
			}
		}
	}
	return long, nil
}

// hasReason reports whether a doc comment has a line that starts with "long:".
func hasReason(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for line := range strings.SplitSeq(doc.Text(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "long:") {
			return true
		}
	}
	return false
}

// funcName returns a function's name, with its receiver's type for a method (T.m).
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}
