package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/internal/redistest"
)

// runningCell is the overview's "Running now" cell of the job named name.
func runningCell(t *testing.T, base, name string) string {
	t.Helper()
	status, body := get(t, base+"/")
	require.Equal(t, 200, status, body)
	m := regexp.MustCompile(`(?s)id="job-` + regexp.QuoteMeta(name) + `">.*?<td class="running">(.*?)</td>`).FindStringSubmatch(body)
	require.NotNil(t, m, "no row of %s in:\n%s", name, body)
	return m[1]
}

// jobsRunning is the running count GET /jobs gives for the job named name.
func jobsRunning(t *testing.T, base, name string) int {
	t.Helper()
	status, body := get(t, base+"/jobs")
	require.Equal(t, 200, status, body)
	var doc struct {
		Jobs []struct {
			Name    string `json:"name"`
			Running int    `json:"running"`
		} `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc), body)
	for _, j := range doc.Jobs {
		if j.Name == name {
			return j.Running
		}
	}
	t.Fatalf("no job %s in /jobs: %s", name, body)
	return 0
}

// A long run on one daemon shows in the "Running now" column of every daemon's overview, and
// on the job's page, with its replica, start and attempt, in every daemon's GET /jobs running
// count, and in cronlock status; and no longer once it ended.
func TestConsoleShowsTheClustersRuns(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	fifo := filepath.Join(t.TempDir(), "release")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	jobs := fmt.Sprintf("min_interval: 100ms\njobs:\n  - name: long\n    schedule: \"@yearly\"\n    command: [\"cat\", %q]\n", fifo)
	var cfg string
	bases := map[string]string{}
	for _, r := range []string{"r0", "r1"} {
		cfg = writeFile(t, t.TempDir(), "c.yaml", nodesConfig(nodes)+jobs)
		p := startProc(t, bin, r, nil, "run", "--config", cfg, "--replica", r, "--http", "127.0.0.1:0")
		bases[r] = "http://" + p.httpAddr(t)
	}
	assert.Empty(t, runningCell(t, bases["r0"], "long"), "nothing runs yet")
	assert.Zero(t, jobsRunning(t, bases["r0"], "long"), "nothing runs yet")

	code, out, errOut := runCLI(t, "trigger", "long", "--config", cfg)
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	run := regexp.MustCompile(`^<span class="inflight">on (r[01]) since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(attempt 1, trigger ` + regexp.QuoteMeta(id) + `\)</span>$`)
	cells := map[string]string{}
	for r, base := range bases {
		proctest.Eventually(t, r+"'s overview showing the run", func() bool {
			cells[r] = runningCell(t, base, "long")
			return cells[r] != ""
		})
		assert.Regexp(t, run, cells[r])
	}
	assert.Equal(t, cells["r0"], cells["r1"], "every replica shows the same run, whichever runs it")
	runner := run.FindStringSubmatch(cells["r0"])[1]
	for r, base := range bases {
		assert.Equal(t, 1, jobsRunning(t, base, "long"), "%s's /jobs counts the cluster's run", r)
	}
	code, out, errOut = runCLI(t, "status", "--config", cfg)
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `^JOB +PAUSED +LAST RUN +RUNNING\nlong +no +none recorded +on `+runner+` since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(attempt 1, trigger `+regexp.QuoteMeta(id)+`\)\n$`, out)
	_, page := get(t, bases["r0"]+"/jobs/long")
	assert.Contains(t, page, "Running now: "+cells["r0"]+".")

	w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // the run ends with its input
	require.NoError(t, err)
	require.NoError(t, w.Close())
	for r, base := range bases {
		proctest.Eventually(t, r+"'s overview without the run", func() bool { return runningCell(t, base, "long") == "" })
		assert.Zero(t, jobsRunning(t, base, "long"), "%s's /jobs once the run ended", r)
	}
	_, page = get(t, bases["r0"]+"/jobs/long")
	assert.Contains(t, page, "Running now: no.")
	code, out, errOut = runCLI(t, "status", "long", "--config", cfg)
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `^JOB +PAUSED +LAST RUN +RUNNING\nlong +no +trigger .* ran on `+runner+` +no\n$`, out)
	code, out, errOut = runCLI(t, "history", "long", "--config", cfg)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, runner, "the run recorded by its replica")
}
