//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/web"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/redistest"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

type jobsDoc struct {
	Replica string        `json:"replica"`
	Jobs    []web.JobView `json:"jobs"`
}

// The daemon in this process (so that goleak sees every goroutine it starts end): HTTP
// endpoints, then a clean stop when its context ends.
func TestRunHTTP(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	cfg := writeFile(t, t.TempDir(), "c.yaml", nodesConfig(nodes)+`replica: from-config
http: 127.0.0.1:1  # overridden by --http
min_interval: 100ms
jobs:
  - name: fast
    schedule: "@every 200ms"
    command: ["true"]
  - name: later
    schedule: "@yearly"
    command: ["true"]
`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr proctest.SyncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"run", "--config", cfg, "--http", "127.0.0.1:0", "--replica", "web-1"}, &stdout, &stderr)
	}()

	addr := regexp.MustCompile(`msg="http: serving /healthz /readyz /jobs /metrics" addr=(\S+)`)
	proctest.Eventually(t, "the HTTP server", func() bool { return addr.MatchString(stderr.String()) })
	base := "http://" + addr.FindStringSubmatch(stderr.String())[1]

	status, body := get(t, base+"/healthz")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "ok\n", body)

	status, body = get(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "ready: 3 of 3 nodes answer and are out of quarantine, quorum 2")

	var doc jobsDoc
	proctest.Eventually(t, "a run in /jobs", func() bool {
		status, body := get(t, base+"/jobs")
		require.Equal(t, http.StatusOK, status)
		require.NoError(t, json.Unmarshal([]byte(body), &doc), body)
		return len(doc.Jobs) == 2 && doc.Jobs[0].Last != nil && doc.Jobs[0].Last.Outcome == outcome.Ran
	})
	assert.Equal(t, "web-1", doc.Replica, "--replica overrides the config's replica")
	fast := doc.Jobs[0]
	assert.Equal(t, "fast", fast.Name)
	assert.Equal(t, "@every 200ms", fast.Schedule)
	assert.Nil(t, fast.Command, "command lines go with the bearer token only")
	assert.True(t, fast.NextTick.After(fast.Last.Tick), "next tick %v after the last %v", fast.NextTick, fast.Last.Tick)
	assert.Equal(t, "web-1", fast.Last.Runner)
	assert.NotZero(t, fast.Last.Token)
	assert.False(t, fast.Last.Started.IsZero())
	assert.Equal(t, "later", doc.Jobs[1].Name)
	assert.Nil(t, doc.Jobs[1].Last)
	assert.Equal(t, time.Date(time.Now().Year()+1, 1, 1, 0, 0, 0, 0, time.UTC), doc.Jobs[1].NextTick)

	// The middleware's OpenTelemetry metrics, in the Prometheus exposition format.
	status, body = get(t, base+"/metrics")
	assert.Equal(t, http.StatusOK, status)
	for _, name := range []string{`cronlock_job_runs_total{`, `cronlock_outcome="ran"`, "cronlock_lock_acquire_duration_seconds_bucket", "cronlock_job_duration_seconds"} {
		assert.Contains(t, body, name)
	}
	// What the alert rules (deploy/prometheus) read beside them.
	for _, re := range []string{`(?m)^cronlock_ready 1$`, `(?m)^cronlock_job_interval_seconds\{cronlock_job="fast"\} 0\.2$`,
		`(?m)^cronlock_job_consecutive_failures\{cronlock_job="fast"\} 0$`, `(?m)^cronlock_job_ticks_missed_total\{cronlock_job="fast"\} \d+$`} {
		assert.Regexp(t, re, body)
	}

	// Without a quorum the daemon is not ready (after the cached answer expires).
	require.NoError(t, nodes[1].Kill())
	require.NoError(t, nodes[2].Kill())
	proctest.Eventually(t, "/readyz to say not ready", func() bool {
		status, body := get(t, base+"/readyz")
		return status == http.StatusServiceUnavailable && strings.Contains(body, "not ready: 1 of 3 nodes answer and are out of quarantine, quorum 2")
	})
	proctest.Eventually(t, "cronlock_ready 0 on /metrics", func() bool {
		_, body := get(t, base+"/metrics")
		return regexp.MustCompile(`(?m)^cronlock_ready 0$`).MatchString(body)
	})
	// The probe logs a node's going down once (checked once the daemon stopped, probes later).
	down := `msg="node does not answer" node=` + nodes[1].Addr()
	proctest.Eventually(t, "the log of a node going down", func() bool { return strings.Contains(stderr.String(), down) })

	stopInProcess(t, cancel, code, &stderr)
	assert.Contains(t, stderr.String(), "msg=stopped")
	assert.Contains(t, stderr.String(), `level=WARN msg="redis: `, "go-redis's own log goes to the daemon's")
	assert.Equal(t, 1, strings.Count(stderr.String(), down), stderr.String())
	waitDialProbes(t)
}

// waitDialProbes waits for go-redis's dial probes to end. A pool whose node refuses
// connections starts a goroutine that dials it again every second until it answers or the
// pool is closed; Close does not wait for it, so it lives up to a second after Close — long
// enough for goleak to count it as leaked.
func waitDialProbes(t *testing.T) {
	t.Helper()
	proctest.Eventually(t, "go-redis dial probes to end", func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*ConnPool).tryDial")
	})
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "--help"}, 0, "Usage: cronlock run --config FILE [flags]"},
		{[]string{"run", "--help"}, 0, "-kill-grace duration"},
		{[]string{"help", "run"}, 0, "Usage: cronlock run --config FILE [flags]"},
		{[]string{"validate", "--help"}, 0, "Usage: cronlock validate --config FILE"},
		{[]string{"locks", "-h"}, 0, "Usage: cronlock locks --config FILE [--job NAME]"},
		{[]string{"check", "--help"}, 0, "-end-quarantine"},
		{[]string{"version", "--help"}, 0, "Usage: cronlock version"},
		{[]string{"help"}, 0, "cronlock run --config FILE"},
		{[]string{"run", "--bogus"}, 2, "run: flag provided but not defined: -bogus (see 'cronlock run --help')"},
		{[]string{"run", "--config", "x", "extra"}, 2, `run takes no arguments, got ["extra"]`},
		{[]string{"run", "--config", "x", "--log-level", "loud"}, 2, `invalid value "loud" for flag -log-level`},
		{[]string{"run", "--config", "x", "--kill-grace", "-1s"}, 2, "--kill-grace -1s: must not be negative"},
		{[]string{"run", "--config", "x", "--replica", ""}, 2, "--replica is empty"},
		{[]string{"validate"}, 2, "validate: give the config file with --config FILE"},
		{[]string{"locks"}, 2, "locks: give the config file with --config FILE"},
		{[]string{"check"}, 2, "check: give the config file with --config FILE"},
		{[]string{"check", "--config", "/nonexistent/c.yaml"}, 2, "config: open /nonexistent/c.yaml: no such file or directory"},
		{[]string{"version", "now"}, 2, `version takes no arguments`},
		{[]string{"import-crontab", "--help"}, 0, "Usage: cronlock import-crontab CRONTAB"},
		{[]string{"help", "import-crontab"}, 0, "Usage: cronlock import-crontab CRONTAB"},
		{[]string{"import-crontab"}, 2, "import-crontab takes one crontab file, got 0 arguments"},
		{[]string{"import-crontab", "/nonexistent/crontab"}, 2, "open /nonexistent/crontab: no such file or directory"},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("cronlock %q: exit %d (want %d), output lacks %q:\n%s%s", tc.args, code, tc.code, tc.want, out, errOut)
		}
	}
}

// With tracing.otlp_endpoint set, the daemon exports its spans over OTLP/HTTP (here to a
// stand-in collector that counts the export requests), and flushes them when it stops.
func TestRunExportsTraces(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	exports := make(chan string, 100)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case exports <- r.URL.Path:
		default:
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	cfg := writeFile(t, t.TempDir(), "c.yaml", nodesConfig(nodes)+fmt.Sprintf(`http: ""
tracing:
  otlp_endpoint: %s
min_interval: 100ms
jobs:
  - name: fast
    schedule: "@every 100ms"
    command: ["true"]
`, collector.URL))
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr proctest.SyncBuffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"run", "--config", cfg}, &stdout, &stderr) }()
	proctest.Eventually(t, "a tick run and marked done", func() bool {
		keys, err := nodes[0].Client().Keys(context.Background(), "*:tick:*").Result()
		return err == nil && len(keys) > 0
	})
	cancel()
	require.Equal(t, 0, <-code, "stderr:\n%s", stderr.String())
	// Stopping flushed the batch: at least one export reached the collector.
	select {
	case path := <-exports:
		assert.Equal(t, "/v1/traces", path)
	default:
		t.Fatalf("no span export reached the collector; stderr:\n%s", stderr.String())
	}
}

// /readyz is 503 while a quorum of nodes is in quarantine, with each node's state and until
// when, and 200 again after; the probe logs each node's quarantine once.
func TestReadyzQuarantine(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	cfg := writeFile(t, t.TempDir(), "c.yaml", nodesConfig(nodes)+`max_ttl: 2s
jobs:
  - {name: tick, schedule: "@every 1s", lock_ttl: 1s, command: ["true"]}
`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr proctest.SyncBuffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"run", "--config", cfg, "--http", "127.0.0.1:0"}, &stdout, &stderr) }()
	addr := regexp.MustCompile(`msg="http: serving /healthz /readyz /jobs /metrics" addr=(\S+)`)
	proctest.Eventually(t, "the HTTP server", func() bool { return addr.MatchString(stderr.String()) })
	readyz := "http://" + addr.FindStringSubmatch(stderr.String())[1] + "/readyz"
	proctest.Eventually(t, "ready", func() bool { status, _ := get(t, readyz); return status == http.StatusOK })

	// Two nodes lose their memory: the next lock attempt puts them in quarantine for max_ttl.
	for _, n := range nodes[:2] {
		require.NoError(t, n.Client().FlushAll(context.Background()).Err())
	}
	proctest.Eventually(t, "not ready during the quarantine", func() bool {
		status, body := get(t, readyz)
		return status == http.StatusServiceUnavailable &&
			strings.Contains(body, "not ready: 1 of 3 nodes answer and are out of quarantine, quorum 2") &&
			strings.Contains(body, "nodes[0]: in quarantine until ") && strings.Contains(body, "nodes[2]: ok")
	})
	proctest.Eventually(t, "ready after the quarantine", func() bool { status, _ := get(t, readyz); return status == http.StatusOK })
	for _, n := range nodes[:2] {
		proctest.Eventually(t, "the log of the quarantine's end", func() bool {
			return strings.Contains(stderr.String(), `msg="node grants locks again" node=`+n.Addr())
		})
	}
	stderrNow := stderr.String()
	for _, n := range nodes[:2] {
		assert.Equal(t, 1, strings.Count(stderrNow, `msg="node is in quarantine: it refuses locks until its boot marker's time" node=`+n.Addr()+" until="), stderrNow)
	}
	assert.Contains(t, stderrNow, `msg="fewer nodes grant locks than a quorum: no job can run until enough come back" usable=1`)
	stopInProcess(t, cancel, code, &stderr)
}

// stopInProcess cancels the context of a run started in this process and asserts that it
// returned 0 in time.
func stopInProcess(t *testing.T, cancel context.CancelFunc, code <-chan int, stderr *proctest.SyncBuffer) {
	t.Helper()
	cancel()
	select {
	case c := <-code:
		assert.Equal(t, 0, c, "stderr:\n%s", stderr.String())
	case <-time.After(proctest.WaitLimit):
		t.Fatalf("run did not return:\n%s", stderr.String())
	}
}

// A fresh daemon's /metrics, before any run: cronlock_build_info with the binary's version,
// commit and Go version; the Go runtime's and the process's series; the run counters of every
// configured job at 0; and no otel_scope_* label on any series.
func TestMetricsOfAFreshDaemon(t *testing.T) {
	d := startDaemon(t, "", `  - {name: nightly, schedule: "@yearly", command: ["true"]}
  - {name: weekly, schedule: "@yearly", command: ["true"]}
`)
	status, body := get(t, d.base+"/metrics")
	require.Equal(t, http.StatusOK, status)
	assert.Regexp(t, `(?m)^cronlock_build_info\{commit="[^"]+",go_version="`+regexp.QuoteMeta(runtime.Version())+`",version="[^"]+"\} 1$`, body)
	assert.Regexp(t, `(?m)^go_goroutines \d+$`, body)
	assert.Regexp(t, `(?m)^go_memstats_heap_alloc_bytes `, body)
	assert.Regexp(t, `(?m)^process_resident_memory_bytes `, body)
	assert.Regexp(t, `(?m)^process_cpu_seconds_total `, body)
	for _, job := range []string{"nightly", "weekly"} {
		for _, outcome := range []string{outcome.Ran, outcome.Failed, outcome.SkippedPaused, outcome.LeaseLost} {
			assert.Regexp(t, `(?m)^cronlock_job_runs_total\{cronlock_job="`+job+`",cronlock_outcome="`+outcome+`"\} 0$`, body)
		}
	}
	assert.NotContains(t, body, "otel_scope_")
}
