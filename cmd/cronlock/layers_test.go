package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// layers are the packages under cmd/cronlock/internal, lowest first. A package imports only
// packages of lower layers, so that imports flow one way: web above nodes (web shows what
// nodes probes; nodes knows nothing of web), the commands' packages (check, lockkeys) above the
// node clients they use, the daemon above everything it wires. main may import any of them.
var layers = [][]string{
	{"buildinfo", "exitcode", "pid1", "proctest", "config", "history", "supervise", "backfill"},
	{"cli", "nodes", "demo"},
	{"check", "lockkeys", "web"},
	{"daemon"},
}

const internalPath = "github.com/cronlock/cronlock/cmd/cronlock/internal/"

// TestInternalLayers fails when a package under internal/ imports one of its own layer or of a
// layer above, or when a package is in no layer (place it in one).
func TestInternalLayers(t *testing.T) {
	layer := map[string]int{}
	for i, names := range layers {
		for _, name := range names {
			layer[name] = i
		}
	}
	dirs, err := os.ReadDir("internal")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		from, placed := layer[d.Name()]
		if !placed {
			t.Errorf("internal/%s is in no layer of layers: add it to the layer above everything it imports", d.Name())
			continue
		}
		for _, imp := range internalImports(t, filepath.Join("internal", d.Name())) {
			to, known := layer[imp]
			switch {
			case !known:
				t.Errorf("internal/%s imports internal/%s, which is in no layer", d.Name(), imp)
			case to >= from:
				t.Errorf("internal/%s (layer %d) imports internal/%s (layer %d): imports flow down only; move what both need into a lower package", d.Name(), from, imp, to)
			}
		}
	}
}

// internalImports returns the packages under internal/ that the non-test Go files of dir
// import, by name, each once.
func internalImports(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range f.Imports {
			path, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if name, ok := strings.CutPrefix(path, internalPath); ok {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
