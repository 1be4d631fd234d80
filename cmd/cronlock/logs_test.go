//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/redistest"
)

// With --log-format json every line the daemon writes is a JSON object: its own, go-redis's
// and the commands' output, which is logged at output_level and cut at output_limit.
func TestJSONLogs(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	addrs := []string{"127.0.0.1:1", "127.0.0.1:2"} // never answer: go-redis logs its dial failures
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	cfg := writeFile(t, t.TempDir(), "c.yaml", `nodes: ["`+strings.Join(addrs, `", "`)+`"]
jobs:
  - name: chatty
    schedule: "@every 1s"
    output_level: warn
    output_limit: 1KiB
    command: [sh, -c, 'echo "to stderr" >&2; yes "a line of output with a quote \" in it" | head -c 200000']
`)
	p := startProc(t, bin, "daemon", nil, "run", "--config", cfg, "--log-format", "json")
	p.waitLog(t, `"msg":"the command's output past output_limit was not logged"`)
	p.waitLog(t, `"msg":"redis: `)
	p.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, p.wait(t))

	var output, dropped, stderrLine bool
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), "not a JSON line: %q", sc.Text())
		require.Contains(t, rec, "time")
		require.Contains(t, rec, "level")
		switch {
		case rec["stream"] == "stdout" && rec["msg"] == `a line of output with a quote " in it`:
			output = true
			assert.Equal(t, "WARN", rec["level"], "output_level")
		case rec["stream"] == "stderr":
			stderrLine = true
			assert.Equal(t, "to stderr", rec["msg"])
		case rec["msg"] == "the command's output past output_limit was not logged":
			dropped = true
			assert.Greater(t, rec["dropped_bytes"], 190000.0, "the bytes past 1 KiB")
		}
	}
	require.NoError(t, sc.Err())
	assert.True(t, output && dropped && stderrLine, "output %v, dropped %v, stderr %v", output, dropped, stderrLine)
}
