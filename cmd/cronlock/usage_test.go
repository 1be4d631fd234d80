package main

import (
	"context"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// commandNames returns the command names of the lines of text that start with "cronlock "
// after indent (a line "cronlock pause|resume JOB …" names pause and resume).
func commandNames(text, indent string) []string {
	var names []string
	re := regexp.MustCompile(`(?m)^` + indent + `cronlock ([a-z|-]+)`)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		names = append(names, strings.Split(m[1], "|")...)
	}
	return names
}

// Every command of the usage text runs (--help answers, no "unknown command"), and docs/cli.md's
// overview lists each of them.
func TestUsageListsEveryCommandAndTheDocsToo(t *testing.T) {
	names := commandNames(usage, "  ")
	require.Contains(t, names, "run")
	for _, name := range names {
		assert.Equal(t, 0, run(context.Background(), []string{name, "--help"}, io.Discard, io.Discard), "cronlock %s --help", name)
	}
	doc, err := os.ReadFile("../../docs/cli.md")
	require.NoError(t, err)
	block := regexp.MustCompile("(?s)```\n(cronlock .*?)```").FindSubmatch(doc)
	require.NotNil(t, block, "docs/cli.md: the overview's code block")
	overview := commandNames(string(block[1]), "")
	for _, name := range names {
		assert.Contains(t, overview, name, "docs/cli.md's overview lacks cronlock %s", name)
	}
	for _, name := range overview {
		assert.Contains(t, names, name, "docs/cli.md's overview has cronlock %s, which the usage text lacks", name)
	}
}
