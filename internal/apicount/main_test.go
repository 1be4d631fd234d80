package main

import (
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

func TestCount(t *testing.T) {
	n, err := count(src, "p")
	if err != nil {
		t.Fatal(err)
	}
	if n != 7 {
		t.Errorf("count = %d, want 7", n)
	}
}

func TestCheckFailsAboveLimit(t *testing.T) {
	var out strings.Builder
	if !check(&out, src, []budget{{dir: "p", target: 5, limit: 7}}) {
		t.Errorf("7 names under a limit of 7 failed:\n%s", out.String())
	}
	out.Reset()
	if check(&out, src, []budget{{dir: "p", target: 5, limit: 6}}) {
		t.Errorf("7 names over a limit of 6 passed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "remove 1 exported names") {
		t.Errorf("the failure does not say how many names to remove:\n%s", out.String())
	}
	if check(&out, src, []budget{{dir: "missing"}}) {
		t.Error("a missing package passed")
	}
}
