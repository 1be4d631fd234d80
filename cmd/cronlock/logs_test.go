//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
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
	var stdout, stderr proctest.SyncBuffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"run", "--config", cfg, "--log-format", "json"}, &stdout, &stderr) }()
	proctest.Eventually(t, "the export's error in the daemon's log", func() bool {
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

// A daemon whose stderr is a pipe whose reader goes away (`cronlock run … 2>&1 | head`) goes
// on: its lines are dropped and counted on /metrics, its runs go on, and it stops with exit
// code 0. Its jobs' commands get SIGPIPE's default action, as from any other parent.
func TestLogReaderGoesAway(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	node := redistest.Start(t, redistest.Config{})
	endQuarantine(t, node)
	ledger := t.TempDir() + "/ledger"
	cfg := writeFile(t, t.TempDir(), "c.yaml", nodesConfig([]*redistest.Server{node})+`jobs:
  - {name: tick, schedule: '@every 1s', command: [sh, -c, 'grep SigIgn /proc/self/status >> "$0"', `+ledger+`]}
`)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(bin, "run", "--config", cfg, "--http", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = w, w
	require.NoError(t, cmd.Start())
	require.NoError(t, w.Close()) // the daemon's is the only write end left
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })

	// Read up to the HTTP server's address and the first run, then go away.
	addr := regexp.MustCompile(`msg="http: serving /healthz /readyz /jobs /metrics" addr=(\S+)`)
	var base string
	sc := bufio.NewScanner(r)
	for sc.Scan() && !strings.Contains(sc.Text(), `msg="run finished" job=tick`) {
		if m := addr.FindStringSubmatch(sc.Text()); m != nil {
			base = "http://" + m[1]
		}
	}
	require.NotEmpty(t, base, "no HTTP address in the log")
	require.NoError(t, r.Close())

	runs := len(fileLines(t, ledger))
	proctest.Eventually(t, "three more runs", func() bool { return len(fileLines(t, ledger)) >= runs+3 })
	for _, l := range fileLines(t, ledger) {
		mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(l, "SigIgn:")), 16, 64)
		require.NoError(t, err, l)
		assert.Zero(t, mask&(1<<(syscall.SIGPIPE-1)), "the command ignores SIGPIPE: %s", l)
	}
	proctest.Eventually(t, "the dropped lines counted", func() bool {
		_, body := get(t, base+"/metrics")
		m := regexp.MustCompile(`(?m)^cronlock_log_lines_dropped_total(\{[^}]*\})? (\d+)`).FindStringSubmatch(body)
		return m != nil && m[2] != "0"
	})

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-done:
	case <-time.After(proctest.WaitLimit):
		t.Fatal("the daemon did not stop")
	}
	assert.Equal(t, 0, cmd.ProcessState.ExitCode(), cmd.ProcessState.String())
}

// fileLines returns the lines of the file at path.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}
