//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/internal/scheddefault"
)

// minutesAsSeconds is the test's one rewrite of deploy/prometheus/alerts.yml: every duration
// in minutes (for:, range windows, offsets) becomes as many seconds, so that alerts meant for
// jobs that run every few minutes fire within seconds for jobs that run every second. The
// expressions are otherwise the shipped ones.
var minutesAsSeconds = regexp.MustCompile(`\b(\d+)m\b`)

// alert is an alert of Prometheus's /api/v1/alerts.
type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// A real Prometheus (Debian's prometheus package) scrapes two daemons on three real nodes
// and evaluates the shipped alert rules: the job that always fails and the job whose command a
// SIGHUP reload broke get their alerts firing, the healthy job none; then, with two nodes
// killed, both daemons are not ready.
func TestAlertsFireInPrometheus(t *testing.T) {
	requirePrometheus(t)
	bin := buildBinary(t, t.TempDir())
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	dir := t.TempDir()
	config := func(broken bool) string {
		command := "[\"true\"]"
		if broken {
			command = "[\"false\"]"
		}
		return nodesConfig(nodes) + `jobs:
  - {name: healthy, schedule: '@every 1s', command: ["true"]}
  - {name: failing, schedule: '@every 1s', command: ["false"]}
  - {name: reloaded, schedule: '@every 1s', command: ` + command + `}
`
	}
	cfg := writeFile(t, dir, "c.yaml", config(false))
	var daemons []*proc
	var addrs []string
	for i := range 2 {
		p := startProc(t, bin, fmt.Sprintf("daemon %d", i), nil, "run", "--config", cfg, "--replica", fmt.Sprintf("r%d", i), "--http", "127.0.0.1:0")
		daemons = append(daemons, p)
		addrs = append(addrs, p.httpAddr(t))
	}

	prom := startPrometheus(t, dir, addrs)
	// Each alert fires within its for: (seconds here) once its condition holds; the bound
	// covers the daemons' and Prometheus's start under load, not the rules.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitFiring := func(what string, want ...string) []alert {
		t.Helper()
		return prom.waitFiring(ctx, what, want...)
	}
	// notOf asserts that no alert of the job fires.
	notOf := func(as []alert, job string) {
		t.Helper()
		for _, a := range as {
			assert.False(t, a.Labels["cronlock_job"] == job && a.State == "firing", "an alert of %s fires: %+v", job, a)
		}
	}

	as := waitFiring("the always failing job", "CronlockJobFailing failing")
	notOf(as, "healthy")
	notOf(as, "reloaded")
	// Until now, the reloaded job succeeded: its command is changed to one that fails.
	writeFile(t, dir, "c.yaml", config(true))
	for _, p := range daemons {
		p.signal(t, syscall.SIGHUP)
		p.waitLog(t, "msg=reloaded")
	}
	as = waitFiring("the job broken by the reload", "CronlockJobNoRecentSuccess reloaded", "CronlockJobFailing reloaded", "CronlockJobFailing failing")
	notOf(as, "healthy")
	for _, a := range as {
		if a.State == "firing" {
			assert.Equal(t, "critical", a.Labels["severity"], "%+v", a)
		}
	}

	// Two of the three nodes die: neither daemon has a quorum.
	require.NoError(t, nodes[1].Kill())
	require.NoError(t, nodes[2].Kill())
	var instances []string
	for _, addr := range addrs {
		instances = append(instances, "CronlockDaemonNotReady "+addr)
	}
	waitFiring("the daemons without a quorum", instances...)
	for _, p := range daemons {
		p.signal(t, syscall.SIGTERM)
		assert.Equal(t, 0, p.wait(t))
	}
}

// A real Prometheus scrapes a daemon while another daemon, killed (SIGKILL) in the middle of
// a run, vanishes: the survivor records the run interrupted and counts the killed replica
// missing, and Prometheus fires CronlockRunInterrupted for the job and CronlockReplicaMissing.
// The daemons beat every second, so that the killed one is missing within seconds; the
// rescue of the run takes the lock's TTL plus two rescue periods (scheddefault.RescueEvery).
func TestRunInterruptedAndReplicaMissingFireInPrometheus(t *testing.T) {
	requirePrometheus(t)
	bin := buildBinary(t, t.TempDir())
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "c.yaml", nodesConfig(nodes)+`jobs:
  - name: slow
    schedule: "@every 5s"
    lock_ttl: 2s
    command: ["sh", "-c", "if [ \"$CRONLOCK_REPLICA\" = a ]; then sleep 60; fi"]
`)
	a := startProc(t, bin, "daemon a", nil, "run", "--config", cfg, "--replica", "a", "--heartbeat", "1s")
	a.waitLog(t, `msg="run started"`)
	b := startProc(t, bin, "daemon b", nil, "run", "--config", cfg, "--replica", "b", "--heartbeat", "1s", "--http", "127.0.0.1:0")
	prom := startPrometheus(t, dir, []string{b.httpAddr(t)})
	a.signal(t, syscall.SIGKILL)

	// The bound: the lock's TTL (2s) plus two rescue periods, and a margin for Prometheus's
	// scrape and evaluation on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second+2*scheddefault.RescueEvery+30*time.Second)
	defer cancel()
	as := prom.waitFiring(ctx, "the run of the killed daemon and the killed replica", "CronlockRunInterrupted slow", "CronlockReplicaMissing ")
	for _, al := range as {
		if al.State == "firing" {
			assert.Equal(t, "warning", al.Labels["severity"], "%+v", al)
		}
	}
	b.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, b.wait(t))
}

// A real Prometheus scrapes three daemons whose heartbeats (every second) report a hash of
// their configuration; one of them is reloaded (SIGHUP) with another command for the job, so
// that its configuration differs from the other two's, and Prometheus fires
// CronlockReplicaConfigDiffers; it did not before the reload.
func TestReplicaConfigDiffersFiresInPrometheus(t *testing.T) {
	requirePrometheus(t)
	bin := buildBinary(t, t.TempDir())
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	dir := t.TempDir()
	config := func(command string) string {
		return nodesConfig(nodes) + "jobs:\n  - {name: yearly, schedule: '@yearly', command: [\"" + command + "\"]}\n"
	}
	var daemons []*proc
	var addrs, files []string
	for i := range 3 {
		r := fmt.Sprintf("r%d", i)
		files = append(files, writeFile(t, t.TempDir(), "c.yaml", config("true")))
		p := startProc(t, bin, "daemon "+r, nil, "run", "--config", files[i], "--replica", r, "--heartbeat", "1s", "--http", "127.0.0.1:0")
		daemons = append(daemons, p)
		addrs = append(addrs, p.httpAddr(t))
	}
	prom := startPrometheus(t, dir, addrs)
	// Every daemon up and scraped, with the same configuration: nothing fires.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	proctest.Eventually(t, "prometheus to scrape the gauge at 0 from the three daemons", func() bool {
		v := prom.values("cronlock_replicas_config_differs")
		return len(v) == 3 && v[addrs[0]] == "0" && v[addrs[1]] == "0" && v[addrs[2]] == "0"
	})
	assert.NotContains(t, firing(prom.alerts()), "CronlockReplicaConfigDiffers ")

	writeFile(t, filepath.Dir(files[2]), "c.yaml", config("/bin/true"))
	daemons[2].signal(t, syscall.SIGHUP)
	daemons[2].waitLog(t, "msg=reloaded")
	as := prom.waitFiring(ctx, "the replica reloaded alone", "CronlockReplicaConfigDiffers ")
	for _, al := range as {
		if al.Labels["alertname"] == "CronlockReplicaConfigDiffers" {
			assert.Equal(t, "warning", al.Labels["severity"], "%+v", al)
		}
	}
	for _, p := range daemons {
		p.signal(t, syscall.SIGTERM)
		assert.Equal(t, 0, p.wait(t))
	}
}

// requirePrometheus skips the test unless a prometheus binary is on PATH, and returns its path.
func requirePrometheus(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not on PATH: install it (scripts/deps.sh; Debian: apt-get install prometheus) to run the alert rules in a real Prometheus")
	}
	return bin
}

// prometheus is a real Prometheus started by a test (startPrometheus).
type prometheus struct {
	t   *testing.T
	api string // its /api/v1/alerts
}

// startPrometheus starts a real Prometheus, in dir, that scrapes the daemons at the HTTP
// addresses addrs every second and evaluates deploy/prometheus/alerts.yml (minutesAsSeconds)
// every second, and waits until it is ready; the test's cleanup stops it.
func startPrometheus(t *testing.T, dir string, addrs []string) *prometheus {
	t.Helper()
	promBin := requirePrometheus(t)
	rules, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml"))
	require.NoError(t, err)
	writeFile(t, dir, "alerts.yml", minutesAsSeconds.ReplaceAllString(string(rules), "${1}s"))
	var targets []string
	for _, addr := range addrs {
		targets = append(targets, fmt.Sprintf("%q", addr))
	}
	promCfg := writeFile(t, dir, "prometheus.yml", `global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [alerts.yml]
scrape_configs:
  - job_name: cronlock
    static_configs:
      - targets: [`+strings.Join(targets, ", ")+`]
`)
	prom := exec.Command(promBin, "--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:0")
	var promOut proctest.SyncBuffer
	prom.Stdout, prom.Stderr = &promOut, &promOut
	require.NoError(t, prom.Start())
	exited := make(chan struct{})
	go func() {
		_ = prom.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = prom.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(proctest.WaitLimit):
			_ = prom.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus:\n%s", promOut.String())
		}
	})
	listening := regexp.MustCompile(`msg="Listening on" address=(\S+)`)
	proctest.Eventually(t, "prometheus to be ready", func() bool {
		return strings.Contains(promOut.String(), `msg="Server is ready to receive web requests."`)
	})
	return &prometheus{t: t, api: "http://" + listening.FindStringSubmatch(promOut.String())[1] + "/api/v1/alerts"}
}

// alerts returns the alerts Prometheus has now.
func (p *prometheus) alerts() []alert {
	p.t.Helper()
	resp, err := http.Get(p.api)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	var doc struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []alert `json:"alerts"`
		} `json:"data"`
	}
	require.NoError(p.t, json.NewDecoder(resp.Body).Decode(&doc))
	require.Equal(p.t, "success", doc.Status)
	return doc.Data.Alerts
}

// values returns the value of each series of the instant query expr, by its instance label.
func (p *prometheus) values(expr string) map[string]string {
	p.t.Helper()
	resp, err := http.Get(strings.TrimSuffix(p.api, "/alerts") + "/query?query=" + url.QueryEscape(expr))
	require.NoError(p.t, err)
	defer resp.Body.Close()
	var doc struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	require.NoError(p.t, json.NewDecoder(resp.Body).Decode(&doc))
	require.Equal(p.t, "success", doc.Status)
	out := map[string]string{}
	for _, r := range doc.Data.Result {
		out[r.Metric["instance"]], _ = r.Value[1].(string)
	}
	return out
}

// waitFiring polls Prometheus's alerts until every alert of want fires ("alertname job", or
// "alertname instance" for an alert of a daemon, see firing) and returns them all, or fails
// the test, naming what it waited for, once ctx is done.
func (p *prometheus) waitFiring(ctx context.Context, what string, want ...string) []alert {
	p.t.Helper()
	for {
		as := p.alerts()
		got := firing(as)
		if !slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(got, w) }) {
			return as
		}
		select {
		case <-ctx.Done():
			p.t.Fatalf("%s: want %q firing, got %q (all: %+v)", what, want, got, as)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// firing returns the names of the alerts firing, as "alertname job" (or "alertname instance"
// for an alert of a daemon; "alertname " for an alert of the cluster), sorted.
func firing(as []alert) []string {
	var out []string
	for _, a := range as {
		if a.State == "firing" {
			out = append(out, a.Labels["alertname"]+" "+a.Labels["cronlock_job"]+a.Labels["instance"])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
