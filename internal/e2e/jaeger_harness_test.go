package e2e

// A Jaeger v2 process for tests (memory storage, OTLP/HTTP in, query HTTP API out, on free
// loopback ports), and a client of its query API.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// jaegerConfig is the collector configuration of the test's Jaeger: OTLP/HTTP receiver, memory
// storage, query service; no internal telemetry, no self-tracing, no other receivers, so that
// it listens on the given ports only.
const jaegerConfig = `
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%d
  jaeger_query:
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// jaeger is a running Jaeger process.
type jaeger struct {
	OTLP  string // host:port of the OTLP/HTTP receiver
	query string // base URL of the query HTTP API
	http  *http.Client
}

// startJaeger starts bin with the test configuration and waits until it is healthy. The
// process is killed when the test ends; its log is printed if the test failed.
func startJaeger(t *testing.T, bin string) *jaeger {
	t.Helper()
	ports := freePorts(t, 4)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jaeger.yaml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, ports[0], ports[1], ports[2], ports[3]), 0o644))
	logPath := filepath.Join(dir, "jaeger.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)

	cmd := exec.Command(bin, "--config", "file:"+cfg)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	started, exited := make(chan error, 1), make(chan error, 1)
	go func() { // owns the process for its whole life (see lockThreadForChild)
		lockThreadForChild()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	require.NoError(t, <-started, "starting %s", bin)
	j := &jaeger{
		OTLP:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3])),
		query: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		http:  &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}},
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		j.http.CloseIdleConnections()
		_ = logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("jaeger log:\n%s", out)
		}
	})

	health := fmt.Sprintf("http://127.0.0.1:%d/status", ports[0])
	deadline := time.Now().Add(60 * time.Second) // a hang guard, not a performance bound
	for {
		select {
		case err := <-exited:
			exited <- err
			out, _ := os.ReadFile(logPath)
			t.Fatalf("jaeger exited at startup (%v):\n%s", err, out)
		default:
		}
		if j.ok(health) && j.ok(j.query+"/api/services") {
			return j
		}
		require.True(t, time.Now().Before(deadline), "jaeger not healthy after 60s")
		time.Sleep(50 * time.Millisecond)
	}
}

func (j *jaeger) ok(u string) bool {
	resp, err := j.http.Get(u)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// The query API's JSON (Jaeger's v1 HTTP API, /api/traces).
type (
	jTrace struct {
		TraceID string  `json:"traceID"`
		Spans   []jSpan `json:"spans"`
	}
	jSpan struct {
		TraceID       string `json:"traceID"`
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		References    []jRef `json:"references"`
		StartTime     int64  `json:"startTime"` // µs
		Duration      int64  `json:"duration"`  // µs
		Tags          []jKV  `json:"tags"`
		Logs          []jLog `json:"logs"`
	}
	jRef struct {
		RefType string `json:"refType"` // CHILD_OF or FOLLOWS_FROM
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	}
	jKV struct {
		Key   string      `json:"key"`
		Type  string      `json:"type"`
		Value json.Number `json:"value"`
	}
	jLog struct {
		Timestamp int64 `json:"timestamp"`
		Fields    []jKV `json:"fields"`
	}
)

// UnmarshalJSON keeps every value as text: strings, numbers and booleans alike.
func (kv *jKV) UnmarshalJSON(b []byte) error {
	var raw struct {
		Key   string          `json:"key"`
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	kv.Key, kv.Type = raw.Key, raw.Type
	var s string
	if err := json.Unmarshal(raw.Value, &s); err == nil {
		kv.Value = json.Number(s)
	} else {
		kv.Value = json.Number(strings.TrimSpace(string(raw.Value)))
	}
	return nil
}

// tag returns the value of the tag key as text, "" if absent.
func tag(kvs []jKV, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			return string(kv.Value)
		}
	}
	return ""
}

// traces returns the traces of service that contain a span of operation, started in [from, to].
func (j *jaeger) traces(ctx context.Context, service, operation string, from, to time.Time) ([]jTrace, error) {
	q := url.Values{
		"service":   {service},
		"operation": {operation},
		"start":     {strconv.FormatInt(from.UnixMicro(), 10)},
		"end":       {strconv.FormatInt(to.UnixMicro(), 10)},
		"limit":     {"10000"},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.query+"/api/traces?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := j.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/traces: %s: %s", resp.Status, buf.String())
	}
	var body struct {
		Data   []jTrace `json:"data"`
		Errors []any    `json:"errors"`
	}
	if err := json.Unmarshal(buf.Bytes(), &body); err != nil {
		return nil, fmt.Errorf("GET /api/traces: %w", err)
	}
	if len(body.Errors) > 0 {
		return nil, fmt.Errorf("GET /api/traces: errors %v", body.Errors)
	}
	return body.Data, nil
}
