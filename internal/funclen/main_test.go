package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// body returns n lines of statements, for a function of n+2 lines.
func body(n int) string { return strings.Repeat("\t_ = 0\n", n) }

func TestLongFuncsNamesOnlyLongOnesWithoutReason(t *testing.T) {
	dir := t.TempDir()
	src := "package p\n\n" +
		"// short is at the limit.\nfunc short() {\n" + body(58) + "}\n\n" + // lines 4-63: 60 lines
		"// long: a reason.\nfunc reasoned() {\n" + body(59) + "}\n\n" + // lines 66-126: 61
		"type T struct{}\n\n" +
		"// m has no reason.\nfunc (*T) m() {\n" + body(59) + "}\n" // lines 131-191: 61
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\nfunc long() {\n"+body(70)+"}\n"), 0o644))

	long, err := longFuncs(dir, 60)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "p.go") + ":131: T.m: 61 lines"}, long)
}
