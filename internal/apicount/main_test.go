package main

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// src declares 7 exported names: Exported, T, T.Method, G, G.Method, A, C (B and d, the
// unexported type's method, its unexported method, and the test file's names do not count).
var src = fstest.MapFS{
	"p/p.go": {Data: []byte(`package p

func Exported() {}
func unexported() {}

type T struct{ Field int }
func (T) Method() {}
func (*T) private() {}

type G[X any] struct{}
func (*G[X]) Method() {}

type hidden struct{}
func (hidden) Method() {}

const (
	A, b = 1, 2
	C = 3
)
var d = 4
`)},
	"p/p_test.go": {Data: []byte("package p\n\nfunc TestX() {}\nvar Fixture = 1\n")},
	"p/README.md": {Data: []byte("not Go")},
}

func TestNames(t *testing.T) {
	got, err := names(src, "p")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Exported", "T", "T.Method", "G", "G.Method", "A", "C"}
	if !slices.Equal(got, want) {
		t.Errorf("names = %q, want %q", got, want)
	}
}

// documented is src with an API table and user documentation that name every name but
// those the tests delete.
func documented(table, user string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for k, v := range src {
		fsys[k] = v
	}
	fsys["p/doc.go"] = &fstest.MapFile{Data: []byte("// Package p.\n//\n// # API at a glance\n//\n//\t" + table + "\npackage p\n")}
	fsys["README.md"] = &fstest.MapFile{Data: []byte(user)}
	fsys["docs/p.md"] = &fstest.MapFile{Data: []byte("`p.C` is three.")}
	fsys["p/example_test.go"] = &fstest.MapFile{Data: []byte("package p_test\n\nfunc ExampleG() { new(p.G[int]).Method() }\n")}
	return fsys
}

func TestUndocumented(t *testing.T) {
	const all = "Exported, T (Method), G, G.Method, A, C"
	for _, c := range []struct {
		name, table, user string
		want              []string
	}{
		{name: "all named", table: all, user: "Exported, T.Method and A."},
		{name: "a method by its type and name", table: "Exported, T, Method, G, A, C", user: "Exported, T.Method and A."},
		{name: "missing from the table", table: "Exported, T.Method, A, C", user: "Exported, T.Method and A.",
			want: []string{"G: not in the API table", "G.Method: not in the API table"}},
		{name: "a longer name is not the name", table: all, user: "Exported, T.Method and AB.",
			want: []string{"A: named by no example"}},
		{name: "a method's name alone is not enough", table: all, user: "Exported, Method and A.",
			want: []string{"T: named by no example", "T.Method: named by no example"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			list, err := names(src, "p")
			if err != nil {
				t.Fatal(err)
			}
			got, err := undocumented(documented(c.table, c.user), "p", list)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("undocumented = %q, want lines starting %q", got, c.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], c.want[i]) {
					t.Errorf("line %d = %q, want it to start %q", i, got[i], c.want[i])
				}
			}
		})
	}
	if got, _ := undocumented(src, "p", []string{"A"}); len(got) != 1 || !strings.Contains(got[0], "API at a glance") {
		t.Errorf("a package without doc.go: %q", got)
	}
}

func TestCheckFailsAboveTarget(t *testing.T) {
	var out strings.Builder
	fsys := documented("Exported, T.Method, G.Method, A, C", "Exported, T.Method, G and A.")
	if !check(&out, fsys, []budget{{dir: "p", target: 7}}) {
		t.Errorf("7 names at a target of 7 failed:\n%s", out.String())
	}
	out.Reset()
	if check(&out, fsys, []budget{{dir: "p", target: 6}}) {
		t.Errorf("7 names over a target of 6 passed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "remove 1 exported names") {
		t.Errorf("the failure does not say how many names to remove:\n%s", out.String())
	}
	if check(&out, fsys, []budget{{dir: "missing"}}) {
		t.Error("a missing package passed")
	}
}
