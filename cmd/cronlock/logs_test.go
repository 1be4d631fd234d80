//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
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
	for _, rec := range jsonLines(t, p.out.String()) {
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
	assert.True(t, output && dropped && stderrLine, "output %v, dropped %v, stderr %v", output, dropped, stderrLine)
}

// jsonLines parses each line of out as a JSON log record with a time and a level, and fails
// the test at a line that is not one.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), "not a JSON line: %q", sc.Text())
		require.Contains(t, rec, "time")
		require.Contains(t, rec, "level")
		recs = append(recs, rec)
	}
	require.NoError(t, sc.Err())
	return recs
}

// OpenTelemetry's errors go through the daemon's log, in its format: here a span export that
// the collector refuses (400), which the SDK reports to its global error handler. Without the
// daemon's handler the SDK would print its own line, in another format, on the process's
// stderr (not the daemon's log).
func TestOTelErrorsAreLogged(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "refused by the test", http.StatusBadRequest)
	}))
	defer collector.Close()
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // ms: export each batch at once
	cfg := writeFile(t, t.TempDir(), "c.yaml", nodesConfig(nodes)+fmt.Sprintf(`tracing:
  otlp_endpoint: %s
jobs:
  - {name: traced, schedule: "@every 1s", command: ["true"]}
`, collector.URL))
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"run", "--config", cfg, "--log-format", "json"}, &stdout, &stderr) }()
	eventually(t, "the export's error in the daemon's log", func() bool {
		return strings.Contains(stderr.String(), `"msg":"opentelemetry"`)
	})
	stopInProcess(t, cancel, code, &stderr)

	var otelErr string
	for _, rec := range jsonLines(t, stderr.String()) {
		if rec["msg"] == "opentelemetry" {
			assert.Equal(t, "WARN", rec["level"])
			otelErr, _ = rec["err"].(string)
		}
	}
	assert.Contains(t, otelErr, "400", "the collector's answer")
}
