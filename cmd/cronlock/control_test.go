//go:build unix

package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/internal/redistest"
)

// daemonUnderTest is a `cronlock run` in this process, on three new nodes.
type daemonUnderTest struct {
	base  string // http://host:port
	cfg   string // the config file
	log   *proctest.SyncBuffer
	nodes []*redistest.Server
}

// startDaemon runs `cronlock run` in this process with jobs (YAML list items), extra
// top-level config and extra flags; it is stopped at cleanup.
func startDaemon(t *testing.T, extra, jobs string, flags ...string) daemonUnderTest {
	t.Helper()
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	cfg := writeFile(t, t.TempDir(), "c.yaml", nodesConfig(nodes)+extra+"jobs:\n"+jobs)
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &proctest.SyncBuffer{}
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"run", "--config", cfg, "--http", "127.0.0.1:0", "--replica", "web-1"}, flags...), io.Discard, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		defer http.DefaultClient.CloseIdleConnections()
		if c := <-code; c != 0 {
			t.Errorf("cronlock run exited %d:\n%s", c, stderr.String())
		} else if t.Failed() {
			t.Logf("cronlock run's log:\n%s", stderr.String())
		}
	})
	addr := regexp.MustCompile(`msg="http: serving [^"]*" addr=(\S+)`)
	proctest.Eventually(t, "the HTTP server", func() bool { return addr.MatchString(stderr.String()) })
	return daemonUnderTest{base: "http://" + addr.FindStringSubmatch(stderr.String())[1], cfg: cfg, log: stderr, nodes: nodes}
}

func post(t *testing.T, url, token string, form string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(form))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// The control endpoints under the token, and the control commands, against one daemon.
func TestControlHTTPAndCommands(t *testing.T) {
	t.Setenv("CRONLOCK_TEST_TOKEN", "s3cret")
	d := startDaemon(t, "http_token_env: CRONLOCK_TEST_TOKEN\nmin_interval: 200ms\n", `  - name: tick
    schedule: "@every 200ms"
    command: ["true"]
`)
	status, _ := post(t, d.base+"/jobs/tick/pause", "", "reason=x")
	assert.Equal(t, http.StatusUnauthorized, status, "no token")
	status, _ = post(t, d.base+"/jobs/tick/pause", "wrong", "reason=x")
	assert.Equal(t, http.StatusUnauthorized, status, "wrong token")
	status, _ = post(t, d.base+"/jobs/nope/pause", "s3cret", "reason=x")
	assert.Equal(t, http.StatusNotFound, status, "unknown job")
	status, body := post(t, d.base+"/jobs/tick/pause", "s3cret", "reason=over+http")
	require.Equal(t, http.StatusOK, status, body)

	proctest.Eventually(t, "a paused tick in the history", func() bool {
		code, out, _ := runCLI(t, "history", "tick", "--config", d.cfg, "-n", "5")
		return code == 0 && strings.Contains(out, "skipped_paused")
	})
	status, body = get(t, d.base+"/metrics")
	require.Equal(t, http.StatusOK, status)
	assert.Regexp(t, `cronlock_job_paused\{[^}]*cronlock_job="tick"[^}]*\} 1\n`, body)
	assert.Regexp(t, `cronlock_job_next_tick_time_seconds\{[^}]*cronlock_job="tick"[^}]*\} 1\.\d+e\+09\n`, body)

	code, out, errOut := runCLI(t, "resume", "tick", "--config", d.cfg)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "resumed tick")
	code, out, errOut = runCLI(t, "pause", "tick", "--config", d.cfg, "--reason", "from the CLI")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, ": from the CLI")
	code, out, errOut = runCLI(t, "trigger", "tick", "--config", d.cfg, "--by", "bob")
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	require.NotEmpty(t, id)
	proctest.Eventually(t, "the manual run in /jobs/tick/history, with who asked", func() bool {
		status, body := get(t, d.base+"/jobs/tick/history?n=50")
		return status == http.StatusOK && regexp.MustCompile(`"Trigger": "`+id+`",\s+"Backfill": false,\s+"By": "bob"`).MatchString(body)
	})
	proctest.Eventually(t, "the manual run in cronlock history, with who asked", func() bool {
		code, out, _ := runCLI(t, "history", "tick", "--config", d.cfg, "-n", "50")
		return code == 0 && strings.Contains(out, "trigger "+id+" by bob")
	})
	status, body = post(t, d.base+"/jobs/tick/pause", "s3cret", "reason=api&by=carol")
	require.Equal(t, http.StatusOK, status, body)
	code, out, errOut = runCLI(t, "status", "tick", "--config", d.cfg)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "by carol: api", "the API's by")
	proctest.Eventually(t, "the pause and who paused in /jobs", func() bool {
		status, body := get(t, d.base+"/jobs")
		return status == http.StatusOK && regexp.MustCompile(`"paused": \{\s+"reason": "api",\s+"since": "[^"]+Z",\s+"by": "carol"\s+\}`).MatchString(body)
	})
	status, body = post(t, d.base+"/jobs/tick/pause", "s3cret", "reason=api&by=%0A")
	assert.Equal(t, http.StatusBadRequest, status, body)
	assert.Contains(t, body, "by: scheduler: operator name")
	code, _, errOut = runCLI(t, "resume", "tick", "--config", d.cfg)
	require.Equal(t, 0, code, errOut)
	lastSuccess := regexp.MustCompile(`cronlock_job_last_success_time_seconds\{[^}]*cronlock_job="tick"[^}]*\} 1\.\d+e\+09\n`)
	proctest.Eventually(t, "the manual run's success in /metrics (read from the nodes at most once a second)", func() bool {
		status, body := get(t, d.base+"/metrics")
		return status == http.StatusOK && lastSuccess.MatchString(body)
	})
	status, body = post(t, d.base+"/jobs/tick/trigger", "s3cret", "")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"trigger":`)

	code, _, errOut = runCLI(t, "pause", "nope", "--config", d.cfg)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `job "nope" is not in`)
	code, _, errOut = runCLI(t, "history", "--config", d.cfg)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "give the job's name")
	status, _ = get(t, d.base+"/jobs/tick/history?n=0")
	assert.Equal(t, http.StatusBadRequest, status)

	code, _, errOut = runCLI(t, "forget", "tick", "--config", d.cfg)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `job "tick" is still in`)
	for _, n := range d.nodes {
		require.NoError(t, n.Client().Set(context.Background(), "{cronlock:retired}:fence", 7, 0).Err())
	}
	code, out, errOut = runCLI(t, "forget", "retired", "--config", d.cfg)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "forgot retired")
	for _, n := range d.nodes {
		assert.Zero(t, n.Client().Exists(context.Background(), "{cronlock:retired}:fence").Val(), n.Addr())
	}
}
