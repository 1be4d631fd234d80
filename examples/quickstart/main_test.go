package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The README's quick start is this program, character for character.
func TestREADMEShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	program, err := os.ReadFile("main.go")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(readme), "## Quick start: a scheduled job")
	require.True(t, ok, "README.md has no quick start")
	_, rest, ok = strings.Cut(rest, "```go\n")
	require.True(t, ok, "the quick start has no Go block")
	block, _, ok := strings.Cut(rest, "```\n")
	require.True(t, ok)
	assert.Equal(t, string(program), block, "README.md's quick start and examples/quickstart/main.go differ: copy the one you changed over the other")
}

// The program starts its worker on real nodes and stops when its context ends.
func TestRunsAndStops(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Config{})
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // stop at once: the job's tick is 06:00 UTC
	require.NoError(t, run(ctx, addrs))
}
