package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/supervise"
)

// TestMain runs the tests, or the supervisor when the test binary is started as one (the
// commands that tests run in this process start os.Executable() as their supervisor).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.Mode {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	// A binary built with -race sleeps a second at exit unless told not to: the supervisors'
	// would last that much longer than their commands.
	if err := os.Setenv("GORACE", "atexit_sleep_ms=0"); err != nil {
		panic(err)
	}
	goleak.VerifyTestMain(m)
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// The demo end to end, shortened: embedded nodes, three replicas, a replica cut off halfway.
func TestDemo(t *testing.T) {
	code, out, errOut := runCLI(t, "demo", "--duration", "3s", "--every", "250ms", "--work", "50ms", "--ttl", "400ms")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"3 embedded Redis-protocol nodes",
		"is cut off from every node",
		"lease_lost",
		"redlock: lease lost",
		" 0 duplicates",
		"fencing tokens strictly increasing",
		"r1 skipped_paused, r2 skipped_paused, r3 skipped_paused",
		"asks for a manual run now (cronlock trigger)",
		"trigger ",
		"1 manual runs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The table and notes only: the scheduler's log lines go to the file named last.
	assert.NotContains(t, out+errOut, "level=", "a log line on the terminal")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	path, ok := strings.CutPrefix(lines[len(lines)-1], "the scheduler's log lines: ")
	require.True(t, ok, "the last line does not name the log file:\n%s", out)
	t.Cleanup(func() { _ = os.Remove(path) })
	logs, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(logs), "level=WARN", "the lost lease is logged")
}

// With -v the scheduler's log lines go to stderr, and no file is named.
func TestDemoVerbose(t *testing.T) {
	code, out, errOut := runCLI(t, "demo", "-v", "--duration", "1s", "--every", "250ms", "--work", "50ms", "--ttl", "400ms")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, errOut, "level=")
	assert.NotContains(t, out, "level=")
	assert.NotContains(t, out, "the scheduler's log lines")
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "no command given"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"demo", "--replicas", "1"}, 2, "--replicas 1: use 2 to 9"},
		{[]string{"demo", "--work", "2s"}, 2, "--work 2s: must be positive and shorter than --every 1s"},
		{[]string{"demo", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"demo", "extra"}, 2, "demo takes no arguments"},
		{[]string{"demo", "--help"}, 0, "Usage: cronlock demo"},
		{[]string{"version"}, 0, "cronlock "},
		{[]string{"help"}, 0, "Usage:"},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("cronlock %q: exit %d (want %d), output lacks %q:\n%s%s", tc.args, code, tc.code, tc.want, out, errOut)
		}
	}
}
