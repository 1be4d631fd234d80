//go:build unix

package main

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/internal/scheddefault"
	"github.com/cronlock/cronlock/scheduler"
)

// A daemon killed (SIGKILL) in the middle of a run: another daemon records the run as
// interrupted — with the killed daemon's replica, pid and token — within the documented bound
// (the lock's TTL plus two rescue periods), counts it in cronlock_job_runs_total, and
// `cronlock history` shows it.
func TestKilledDaemonsRunIsInterrupted(t *testing.T) {
	t.Setenv("CRONLOCK_TEST_TOKEN", "s3cret")
	bin := buildBinary(t, t.TempDir())
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	cfg := writeFile(t, t.TempDir(), "c.yaml", nodesConfig(nodes)+`http_token_env: CRONLOCK_TEST_TOKEN
jobs:
  - name: slow
    schedule: "@every 5s"
    lock_ttl: 2s
    command: ["sh", "-c", "if [ \"$CRONLOCK_REPLICA\" = a ]; then sleep 60; fi"]
`)
	a := startProc(t, bin, "daemon a", nil, "run", "--config", cfg, "--replica", "a")
	a.waitLog(t, `msg="run started"`)
	started := regexp.MustCompile(`msg="run started" job=slow tick=(\S+) token=(\d+)`).FindStringSubmatch(a.out.String())
	require.NotNil(t, started, a.out.String())
	b := startProc(t, bin, "daemon b", nil, "run", "--config", cfg, "--replica", "b", "--http", "127.0.0.1:0")
	base := "http://" + b.httpAddr(t)
	a.signal(t, syscall.SIGKILL)
	killed := time.Now()

	// The bound: the lock's TTL (2s) plus two rescue periods (scheddefault.RescueEvery),
	// and a margin for a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second+2*scheddefault.RescueEvery+20*time.Second)
	defer cancel()
	var rec *scheduler.Record
	for rec == nil {
		for _, r := range historyJSON(t, base+"/jobs/slow/history?n=50", "s3cret") {
			if r.Outcome == "interrupted" {
				rec = &r
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no interrupted record within the bound")
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("recorded interrupted %v after the kill", time.Since(killed).Round(time.Millisecond))
	assert.Equal(t, "a", rec.Replica)
	assert.Equal(t, 1, rec.Attempt)
	assert.Equal(t, started[2], strconv.FormatUint(rec.Token, 10))
	assert.Equal(t, started[1], rec.Tick.UTC().Format("2006-01-02T15:04:05.000Z"))
	assert.Regexp(t, `replica a \(pid \d+\) held the lock of attempt 1 and is gone; found by b`, rec.Error)

	status, body := get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, status)
	assert.Regexp(t, `cronlock_job_runs_total\{[^}]*cronlock_job="slow",cronlock_outcome="interrupted"[^}]*\} 1\n`, body)
	code, out, errOut := runCLI(t, "history", "slow", "--config", cfg)
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `tick \S+\s+1\s+interrupted\s+a\s`, out)
	b.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, b.wait(t))
}
