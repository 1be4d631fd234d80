//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/web"
	"github.com/cronlock/cronlock/internal/redistest"
)

// replicasDoc is GET /replicas.
type replicasDoc struct {
	Replica  string            `json:"replica"`
	Replicas []web.ReplicaView `json:"replicas"`
}

// getReplicas reads GET /replicas of the daemon at base, by name.
func getReplicas(t *testing.T, base string) map[string]web.ReplicaView {
	t.Helper()
	status, body := get(t, base+"/replicas")
	require.Equal(t, http.StatusOK, status, body)
	var doc replicasDoc
	require.NoError(t, json.Unmarshal([]byte(body), &doc), body)
	out := map[string]web.ReplicaView{}
	for _, r := range doc.Replicas {
		out[r.Name] = r
	}
	return out
}

// replicaLine returns the line of `cronlock replicas`'s table of the replica name.
func replicaLine(out, name string) string {
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// Three daemons, each with its own copy of one config: `cronlock replicas`, GET /replicas and
// the console list them alive with one configuration; a reload on one of a file whose job
// runs another command shows its configuration differing; kill -9 of it shows it missing since its last heartbeat, once
// the heartbeat bound (3 heartbeats + 1s) has passed, while the others stay alive; a daemon
// stopped by SIGTERM is no longer listed.
func TestReplicasCommand(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	_, v := runBin(t, bin, nil, "version")
	version := strings.TrimPrefix(strings.SplitN(v, "\n", 2)[0], "cronlock ")
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	const jobs = `min_interval: 100ms
jobs:
  - name: report
    schedule: "@every 1h"
    command: ["true"]
`
	var cfgs []string
	var daemons []*proc
	var bases []string
	for i := range 3 {
		cfgs = append(cfgs, writeFile(t, t.TempDir(), "c.yaml", nodesConfig(nodes)+jobs))
		p := startProc(t, bin, fmt.Sprintf("r%d", i), nil, "run", "--config", cfgs[i], "--replica", fmt.Sprintf("r%d", i),
			"--heartbeat", "200ms", "--http", "127.0.0.1:0")
		daemons = append(daemons, p)
		bases = append(bases, "http://"+p.httpAddr(t))
	}

	var out string
	proctest.Eventually(t, "three replicas alive", func() bool {
		var code int
		code, out, _ = runCLI(t, "replicas", "--config", cfgs[0])
		return code == 0 && strings.Count(out, " alive ") == 3
	})
	assert.Regexp(t, `^NAME +STATE +VERSION +STARTED \(UTC\) +LAST SEEN \(UTC\) +JOBS +CONFIG +RUNNING\n`, out)
	assert.NotContains(t, out, "*", "one configuration")
	for i := range 3 {
		assert.Regexp(t, fmt.Sprintf(`^r%d +alive +`+regexp.QuoteMeta(version)+` +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(\d+s ago\) +1 +[0-9a-f]{12} +0$`, i),
			replicaLine(out, fmt.Sprintf("r%d", i)))
	}
	got := getReplicas(t, bases[0])
	require.Len(t, got, 3)
	assert.Equal(t, []string{"report"}, got["r1"].Jobs)
	assert.Equal(t, 0.2, got["r1"].HeartbeatSeconds)
	assert.Equal(t, 1.6, got["r1"].MissingAfterSeconds, "3 heartbeats plus 1s of skew")
	assert.Equal(t, got["r0"].ConfigHash, got["r2"].ConfigHash)

	// r2's file changes the job's command, and r2 reloads it: its configuration differs.
	require.NoError(t, os.WriteFile(cfgs[2], []byte(nodesConfig(nodes)+strings.Replace(jobs, `["true"]`, `["/bin/true"]`, 1)), 0o600))
	daemons[2].signal(t, syscall.SIGHUP)
	proctest.Eventually(t, "r2's configuration differing", func() bool {
		_, out, _ = runCLI(t, "replicas", "--config", cfgs[0])
		return strings.Contains(replicaLine(out, "r2"), " * ")
	})
	assert.Regexp(t, ` 1 +[0-9a-f]{12} \* +0$`, replicaLine(out, "r2"), "marked")
	assert.NotContains(t, replicaLine(out, "r0"), "*")
	assert.NotContains(t, replicaLine(out, "r1"), "*")
	assert.Contains(t, out, "* configuration differs from the majority of alive replicas: reload (SIGHUP) or restart them with the same file\n")
	got = getReplicas(t, bases[1])
	assert.True(t, got["r2"].ConfigDiffers)
	assert.False(t, got["r0"].ConfigDiffers)

	// kill -9 of r2: missing since its last heartbeat, once the bound passed.
	require.NoError(t, daemons[2].cmd.Process.Kill())
	daemons[2].wait(t)
	killed := time.Now()
	proctest.Eventually(t, "r2 missing", func() bool {
		_, out, _ = runCLI(t, "replicas", "--config", cfgs[0])
		return strings.Contains(replicaLine(out, "r2"), "missing since")
	})
	assert.Contains(t, replicaLine(out, "r0"), " alive ")
	assert.Contains(t, replicaLine(out, "r1"), " alive ")
	assert.NotContains(t, out, "*", "a missing replica's configuration is not compared")
	got = getReplicas(t, bases[0])
	require.NotNil(t, got["r2"].MissingSince)
	assert.False(t, got["r2"].Alive)
	assert.Equal(t, got["r2"].LastSeen, *got["r2"].MissingSince)
	assert.False(t, got["r2"].LastSeen.After(killed), "missing since its last heartbeat, before the kill")
	assert.Contains(t, replicaLine(out, "r2"), "missing since "+got["r2"].LastSeen.Format("15:04:05"))

	proctest.Eventually(t, "the gauges counting r2 missing", func() bool {
		_, metrics := get(t, bases[0]+"/metrics")
		return strings.Contains(metrics, `cronlock_replicas{cronlock_state="missing"} 1`+"\n") &&
			strings.Contains(metrics, `cronlock_replicas{cronlock_state="alive"} 2`+"\n") &&
			strings.Contains(metrics, "cronlock_replicas_config_differs 0\n")
	})

	// The console of r0 shows it too, in a real browser.
	ctx := browser(t)
	waitText(t, ctx, bases[0]+"/", "#replica-r2 td.state", "missing since")
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#replica-r0 td.state`)))
	require.NoError(t, err)
	assert.Equal(t, "alive", text)
	text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#replica-r0 td.name`)))
	require.NoError(t, err)
	assert.Equal(t, "r0 (this page)", text)
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.replicas tr.replica")].map(r => r.id + " " + r.className)`))
	require.NoError(t, err)
	assert.Equal(t, []string{"replica-r0 replica", "replica-r1 replica", "replica-r2 replica attention-0"}, rows)
	screenshot(t, ctx, bases[0]+"/", "console-replicas.png")

	// SIGTERM of r1: it stops cleanly and removes itself.
	daemons[1].signal(t, syscall.SIGTERM)
	require.Equal(t, 0, daemons[1].wait(t), daemons[1].out.String())
	_, out, _ = runCLI(t, "replicas", "--config", cfgs[0])
	assert.Empty(t, replicaLine(out, "r1"), out)
	assert.Contains(t, replicaLine(out, "r0"), " alive ")
	assert.Contains(t, replicaLine(out, "r2"), "missing since")
}

// replicas refuses what it cannot use, with the fix.
func TestReplicasCommandUsage(t *testing.T) {
	code, _, errOut := runCLI(t, "replicas")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "replicas: give the config file with --config FILE")
	code, _, errOut = runCLI(t, "replicas", "--config", filepath.Join(t.TempDir(), "c.yaml"), "extra")
	assert.Equal(t, 2, code)
	assert.Regexp(t, regexp.MustCompile(`replicas takes no arguments, got \["extra"\]`), errOut)
	code, out, _ := runCLI(t, "replicas", "--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "Usage: cronlock replicas --config FILE")
	code, _, errOut = runCLI(t, "run", "--config", filepath.Join(t.TempDir(), "c.yaml"), "--heartbeat", "0s")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--heartbeat 0s: give a positive interval, e.g. 10s")
	code, _, errOut = runCLI(t, "run", "--config", filepath.Join(t.TempDir(), "c.yaml"), "--rescue-every", "-1s")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--rescue-every -1s: give a positive interval, e.g. 10s")
}
