// Command docscheck checks that every Go identifier the docs name in a qualified form exists in
// the code, so that a renamed or removed identifier cannot stay in the docs unnoticed.
//
//	go run ./internal/docscheck [-root DIR] [FILE.md ...]
//
// Without files it reads docs/*.md, README.md and bench/README.md under the root (default: the
// current directory, the repository's root). In each file it looks at the inline code spans
// (text in backticks, outside fenced code blocks) for dotted names of two forms:
//
//   - pkg.Name, pkg.Type.Member: pkg is the name of one of the repository's packages (redlock,
//     scheduler, middleware, job, …); Name must be an exported function, type, variable or
//     constant of a package of that name, and Member a method or field of that type;
//   - Type.Member: Type is an exported type of one of the repository's packages, written in
//     CamelCase (e.g. Lock.Token, Options.Retries); Member must be a method or field of a
//     type of that name, directly or through an embedded field.
//
// Only exported members are checked (`Lease.Context`, not `cfg.maxTTL`); names qualified by a
// variable or by another package (`locks.Acquire`, `slog.Default`) are not, and neither are
// all-capitals placeholders or file names (`JOB.TICK`, `README.md`). It parses the
// repository's non-test Go files with go/parser (no build, no type check).
//
// It also looks at the prose (outside fenced code blocks) for phrases that narrate history
// ("previously", "as it was before", "Now" opening a sentence, …: historyPhrase): the docs
// state what is true now, and CHANGELOG.md says how it changed.
//
// Each name not found is printed as FILE:LINE: NAME: what is missing, each narration as
// FILE:LINE: "PHRASE": …, and the exit status is 1.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	files := flag.Args()
	if len(files) == 0 {
		var err error
		if files, err = defaultDocs(*root); err != nil {
			fmt.Fprintln(os.Stderr, "docscheck:", err)
			os.Exit(2)
		}
	}
	api, err := loadAPI(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docscheck:", err)
		os.Exit(2)
	}
	var problems, history []string
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "docscheck:", err)
			os.Exit(2)
		}
		for _, p := range api.check(string(text)) {
			problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", f, p.line, p.name, p.why))
		}
		for _, p := range narration(string(text)) {
			history = append(history, fmt.Sprintf("%s:%d: %q: %s", f, p.line, p.name, p.why))
		}
	}
	for _, p := range history {
		fmt.Println(p)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Printf("docscheck: %d name(s) in the docs do not exist in the code: rename them in the doc, or add what they name\n", len(problems))
	}
	if len(history) > 0 {
		fmt.Printf("docscheck: %d place(s) in the docs narrate history (historyPhrase in internal/docscheck/history.go lists the phrases)\n", len(history))
	}
	if len(problems) > 0 || len(history) > 0 {
		os.Exit(1)
	}
}

// defaultDocs lists the files checked when none are given.
func defaultDocs(root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, f := range []string{"README.md", filepath.Join("bench", "README.md")} {
		p := filepath.Join(root, f)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s: %w (run from the repository's root, or give -root)", f, err)
		}
		files = append(files, p)
	}
	return files, nil
}

// api holds the exported identifiers of the repository's packages.
type api struct {
	// pkgs maps a package name to its exported top-level names (one set for every package of
	// that name).
	pkgs map[string]map[string]bool
	// pkgTypes maps a package name to its exported type names.
	pkgTypes map[string]map[string]bool
	// members maps a type name to its fields and methods, of every type of that name.
	members map[string]map[string]bool
	// embeds maps a type name to the names of the types it embeds.
	embeds map[string][]string
}

// loadAPI parses every non-test Go file under root, skipping hidden directories, testdata and
// vendor.
func loadAPI(root string) (*api, error) {
	a := &api{
		pkgs:     map[string]map[string]bool{},
		pkgTypes: map[string]map[string]bool{},
		members:  map[string]map[string]bool{},
		embeds:   map[string][]string{},
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name != "main" {
			a.addFile(f)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(a.pkgs) == 0 {
		return nil, fmt.Errorf("no Go package under %s: run from the repository's root, or give -root", root)
	}
	return a, nil
}

func (a *api) addFile(f *ast.File) {
	pkg := f.Name.Name
	if a.pkgs[pkg] == nil {
		a.pkgs[pkg] = map[string]bool{}
		a.pkgTypes[pkg] = map[string]bool{}
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				a.pkgs[pkg][d.Name.Name] = true
			} else if recv := typeName(d.Recv.List[0].Type); recv != "" {
				a.member(recv, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						a.pkgs[pkg][n.Name] = true
					}
				case *ast.TypeSpec:
					a.pkgs[pkg][s.Name.Name] = true
					a.pkgTypes[pkg][s.Name.Name] = true
					a.addType(s.Name.Name, s.Type)
				}
			}
		}
	}
}

// addType records the fields, interface methods and embedded types of type name.
func (a *api) addType(name string, t ast.Expr) {
	var fields *ast.FieldList
	switch t := t.(type) {
	case *ast.StructType:
		fields = t.Fields
	case *ast.InterfaceType:
		fields = t.Methods
	default:
		return
	}
	for _, f := range fields.List {
		if len(f.Names) == 0 {
			if emb := typeName(f.Type); emb != "" {
				a.member(name, emb)
				a.embeds[name] = append(a.embeds[name], emb)
			}
			continue
		}
		for _, n := range f.Names {
			a.member(name, n.Name)
		}
	}
}

func (a *api) member(typ, name string) {
	if a.members[typ] == nil {
		a.members[typ] = map[string]bool{}
	}
	a.members[typ][name] = true
}

// typeName returns the name of the type in a receiver or embedded field: T, *T, T[K], pkg.T.
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return typeName(e.X)
	case *ast.IndexExpr:
		return typeName(e.X)
	case *ast.IndexListExpr:
		return typeName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// hasMember reports whether a type named typ has member name, directly or through its
// embedded types.
func (a *api) hasMember(typ, name string) bool {
	seen := map[string]bool{}
	var look func(string) bool
	look = func(t string) bool {
		if seen[t] {
			return false
		}
		seen[t] = true
		if a.members[t][name] {
			return true
		}
		for _, e := range a.embeds[t] {
			if look(e) {
				return true
			}
		}
		return false
	}
	return look(typ)
}

func (a *api) isType(name string) bool {
	for _, types := range a.pkgTypes {
		if types[name] {
			return true
		}
	}
	return false
}

type problem struct {
	line int
	name string
	why  string
}

var (
	fence    = regexp.MustCompile("^ {0,3}(```|~~~)")
	codeSpan = regexp.MustCompile("(`+)([^`]+?)(`+)")
	dotted   = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+`)
)

// check returns the names in text's inline code spans that do not exist in the code.
func (a *api) check(text string) []problem {
	lines := strings.Split(text, "\n")
	var problems []problem
	inFence := false
	for i := range lines {
		if fence.MatchString(lines[i]) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, span := range codeSpan.FindAllStringSubmatchIndex(lines[i], -1) {
			code := lines[i][span[4]:span[5]]
			for _, loc := range dotted.FindAllStringIndex(code, -1) {
				// A name that continues a longer path or call chain (x.y after a ")" or a
				// "."), or a key path (a[0].b), is not a qualified identifier.
				if loc[0] > 0 && strings.ContainsRune(").]", rune(code[loc[0]-1])) {
					continue
				}
				name := code[loc[0]:loc[1]]
				if why := a.missing(name); why != "" {
					problems = append(problems, problem{line: i + 1, name: name, why: why})
				}
			}
		}
	}
	return problems
}

// missing returns why name does not exist, or "" if it does or is not a name checked.
func (a *api) missing(name string) string {
	parts := strings.Split(name, ".")
	if names, ok := a.pkgs[parts[0]]; ok {
		if !exported(parts[1]) {
			return ""
		}
		if !names[parts[1]] {
			return fmt.Sprintf("package %s has no exported %s", parts[0], parts[1])
		}
		if len(parts) < 3 || !exported(parts[2]) {
			return ""
		}
		if !a.pkgTypes[parts[0]][parts[1]] {
			return fmt.Sprintf("%s.%s is not a type, so it has no member %s", parts[0], parts[1], parts[2])
		}
		if !a.hasMember(parts[1], parts[2]) {
			return fmt.Sprintf("type %s.%s has no field or method %s", parts[0], parts[1], parts[2])
		}
		return ""
	}
	if !camelCase(parts[0]) || !exported(parts[1]) || !a.isType(parts[0]) {
		return ""
	}
	if !a.hasMember(parts[0], parts[1]) {
		return fmt.Sprintf("no type %s has a field or method %s", parts[0], parts[1])
	}
	return ""
}

func exported(name string) bool { return name != "" && unicode.IsUpper(rune(name[0])) }

// camelCase reports whether name is written as a Go type name (Client, LockConfig), not as an
// all-capitals placeholder (JOB, TICK).
func camelCase(name string) bool {
	return exported(name) && strings.IndexFunc(name, unicode.IsLower) >= 0
}
