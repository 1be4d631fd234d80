//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/scheduler"
)

// Two daemons on three real nodes; `cronlock backfill` asks each of them at once for the same
// range: every tick runs once, marked as backfilled, and a second backfill runs nothing. An
// interrupted backfill stops after the tick under way; the rest is backfilled later, each
// tick once. Bad requests are refused before anything runs.
func TestBackfillCommand(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger")
	line := `echo "$CRONLOCK_JOB $CRONLOCK_TICK_UNIX_MS ${CRONLOCK_BACKFILL:-0} $CRONLOCK_REPLICA" >> ` + ledger
	cfg := writeFile(t, dir, "c.yaml", nodesConfig(nodes)+`http_token_env: CRONLOCK_TEST_TOKEN
jobs:
  - {name: quick, schedule: '@every 1m', command: [sh, -c, '`+line+`; sleep 0.1']}
  - {name: slow, schedule: '@every 1m', command: [sh, -c, '`+line+`; sleep 1']}
`)
	env := []string{"CRONLOCK_TEST_TOKEN=s3cret"}
	var bases []string
	for i := range 2 {
		p := startProc(t, bin, fmt.Sprintf("daemon %d", i), env, "run", "--config", cfg, "--replica", fmt.Sprintf("r%d", i), "--http", "127.0.0.1:0")
		bases = append(bases, "http://"+p.httpAddr(t))
		t.Cleanup(func() { p.signal(t, syscall.SIGTERM); assert.Equal(t, 0, p.wait(t)) })
	}
	to := time.Now().Truncate(time.Minute).Add(-time.Minute)
	from := to.Add(-9 * time.Minute)
	rangeArgs := func(job string, base string) []string {
		return []string{"backfill", job, "--config", cfg, "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--url", base, "--by", "dave"}
	}
	// runs counts the ledger's backfilled runs of job by tick, and fails on a run of a tick in
	// the range that was not a backfill.
	runs := func(job string) map[int64]int {
		out := map[int64]int{}
		for _, f := range ledgerLines(t, ledger) {
			ms, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			if f[0] != job || ms < from.UnixMilli() || ms > to.UnixMilli() {
				continue
			}
			assert.Equal(t, "1", f[2], "a run of a tick in the range that was not a backfill: %q", f)
			out[ms]++
		}
		return out
	}

	var clis []*proc
	for i, base := range bases {
		clis = append(clis, startProc(t, bin, fmt.Sprintf("backfill %d", i), env, rangeArgs("quick", base)...))
	}
	var ran, done int
	summary := regexp.MustCompile(`backfill quick: 10 ticks: ran (\d+), already done (\d+), failed 0, run elsewhere (\d+)`)
	for _, c := range clis {
		require.Equal(t, 0, c.wait(t), c.out.String())
		m := summary.FindStringSubmatch(c.out.String())
		require.NotNil(t, m, c.out.String())
		var r, d, e int
		fmt.Sscan(m[1]+" "+m[2]+" "+m[3], &r, &d, &e)
		ran, done = ran+r, done+d+e
		assert.Contains(t, c.out.String(), "10/10 "+to.UTC().Format(time.RFC3339), "a progress line a tick")
	}
	assert.Equal(t, 10, ran, "each tick ran by one of the two")
	got := runs("quick")
	for tick := from; !tick.After(to); tick = tick.Add(time.Minute) {
		assert.Equal(t, 1, got[tick.UnixMilli()], "tick %s", tick.Format(time.TimeOnly))
	}
	code, out := runBin(t, bin, env, rangeArgs("quick", bases[1])...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "backfill quick: 10 ticks: ran 0, already done 10, failed 0, run elsewhere 0")
	code, out = runBin(t, bin, env, "history", "quick", "--config", cfg, "-n", "20")
	require.Equal(t, 0, code, out)
	assert.Equal(t, 10, strings.Count(out, "backfill "+to.UTC().Format("2006-01-02")), "the history names the backfilled runs:\n%s", out)
	assert.Equal(t, 10, strings.Count(out, " by dave "), "and who asked for them (--by):\n%s", out)

	// Interrupted after its first tick, the backfill ends with the tick under way; a second one
	// later runs the rest, each once: had the first gone on, its runs would be found done or
	// under way elsewhere.
	first := startProc(t, bin, "backfill interrupted", env, rangeArgs("slow", bases[0])...)
	first.waitLog(t, "1/10 ")
	first.signal(t, syscall.SIGINT)
	assert.Equal(t, 1, first.wait(t))
	assert.Contains(t, first.out.String(), "backfill slow: interrupted")
	code, out = runBin(t, bin, env, rangeArgs("slow", bases[1])...)
	require.Equal(t, 0, code, out)
	m := regexp.MustCompile(`backfill slow: 10 ticks: ran (\d+), already done (\d+), failed 0, run elsewhere (\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	var r, d, e int
	fmt.Sscan(m[1]+" "+m[2]+" "+m[3], &r, &d, &e)
	assert.LessOrEqual(t, d+e, 2, "the interrupted backfill ran its first tick and at most the one under way: %s", out)
	assert.Equal(t, 10, r+d+e)
	got = runs("slow")
	for tick := from; !tick.After(to); tick = tick.Add(time.Minute) {
		assert.Equal(t, 1, got[tick.UnixMilli()], "tick %s", tick.Format(time.TimeOnly))
	}

	for _, tc := range []struct {
		name  string
		args  []string
		token string
		code  int
		want  string
	}{
		{"no job", []string{"backfill", "--config", cfg, "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:00:00Z"}, "s3cret", 2, "give the job's name"},
		{"bad time", []string{"backfill", "quick", "--config", cfg, "--from", "yesterday", "--to", "2026-01-01T00:00:00Z"}, "s3cret", 2, `--from "yesterday": give an RFC 3339 time`},
		{"unknown job", []string{"backfill", "nope", "--config", cfg, "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:00:00Z"}, "s3cret", 2, `job "nope" is not in`},
		{"no token", rangeArgs("quick", bases[0]), "", 2, "http_token_env: environment variable CRONLOCK_TEST_TOKEN is empty: export it"},
		{"wrong token", rangeArgs("quick", bases[0]), "wrong", 1, "401 Unauthorized"},
		{"too many", append(rangeArgs("quick", bases[0]), "--max", "3"), "s3cret", 1, "more than 3 ticks"},
		{"reversed", []string{"backfill", "quick", "--config", cfg, "--from", to.Format(time.RFC3339), "--to", from.Format(time.RFC3339), "--url", bases[0]}, "s3cret", 1, "400 Bad Request"},
		{"no daemon", rangeArgs("quick", "http://127.0.0.1:1"), "s3cret", 1, "is a daemon of this config running there?"},
	} {
		code, out := runBin(t, bin, []string{"CRONLOCK_TEST_TOKEN=" + tc.token}, tc.args...)
		assert.Equal(t, tc.code, code, "%s: %s", tc.name, out)
		assert.Contains(t, out, tc.want, tc.name)
	}
	status, body := post(t, bases[0]+"/jobs/quick/backfill", "s3cret", url.Values{"from": {"x"}, "to": {"y"}}.Encode())
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, `from: "x" is not an RFC 3339 time`)
	status, _ = post(t, bases[0]+"/jobs/nope/backfill", "s3cret", url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}.Encode())
	assert.Equal(t, http.StatusNotFound, status)
	assert.Len(t, runs("quick"), 10, "nothing more ran")
}

// A job paused across a stretch of ticks, then resumed: `cronlock backfill` over the range
// leaves the ticks skipped while it was paused alone and counts them in its summary; with
// --include-paused it runs each of them, once.
func TestBackfillSkipsTicksSkippedWhilePaused(t *testing.T) {
	t.Setenv("CRONLOCK_TEST_TOKEN", "s3cret")
	ledger := filepath.Join(t.TempDir(), "ledger")
	d := startDaemon(t, "http_token_env: CRONLOCK_TEST_TOKEN\n", `  - name: tick
    schedule: "@every 1s"
    command: [sh, -c, 'echo "$CRONLOCK_JOB $CRONLOCK_TICK_UNIX_MS ${CRONLOCK_BACKFILL:-0} $CRONLOCK_REPLICA" >> `+ledger+`']
`)
	// history returns the job's records in [from, to] by outcome.
	history := func(from, to time.Time) map[string][]time.Time {
		status, body := get(t, d.base+"/jobs/tick/history?n=100")
		require.Equal(t, http.StatusOK, status, body)
		var records []scheduler.Record
		require.NoError(t, json.Unmarshal([]byte(body), &records))
		out := map[string][]time.Time{}
		for _, r := range records {
			if r.Trigger == "" && !r.Tick.Before(from) && !r.Tick.After(to) {
				out[r.Outcome] = append(out[r.Outcome], r.Tick)
			}
		}
		return out
	}
	// backfilled counts the ledger's backfilled runs by tick.
	backfilled := func() map[int64]int {
		out := map[int64]int{}
		for _, f := range ledgerLines(t, ledger) {
			if f[2] == "1" {
				ms, err := strconv.ParseInt(f[1], 10, 64)
				require.NoError(t, err)
				out[ms]++
			}
		}
		return out
	}

	from := time.Now().Truncate(time.Second)
	proctest.Eventually(t, "a run", func() bool { return len(history(from, time.Now())[outcome.Ran]) > 0 })
	code, _, errOut := runCLI(t, "pause", "tick", "--config", d.cfg, "--reason", "maintenance")
	require.Equal(t, 0, code, errOut)
	proctest.Eventually(t, "three ticks skipped while paused", func() bool {
		return len(history(from, time.Now())[outcome.SkippedPaused]) >= 3
	})
	code, _, errOut = runCLI(t, "resume", "tick", "--config", d.cfg)
	require.Equal(t, 0, code, errOut)
	resumed := time.Now()
	proctest.Eventually(t, "a run after the pause", func() bool {
		return slices.ContainsFunc(history(from, time.Now())[outcome.Ran], resumed.Before)
	})
	to := time.Now().Truncate(time.Second).Add(-time.Second)
	paused := history(from, to)[outcome.SkippedPaused]
	require.GreaterOrEqual(t, len(paused), 3)

	args := []string{"backfill", "tick", "--config", d.cfg, "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--url", d.base}
	code, out, errOut := runCLI(t, args...)
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, fmt.Sprintf(`backfill tick: \d+ ticks: ran \d+, already done \d+, failed 0, run elsewhere 0, skipped while paused %d\n`, len(paused)), out)
	runs := backfilled()
	for _, tick := range paused {
		assert.Zero(t, runs[tick.UnixMilli()], "tick %s, skipped while paused, was backfilled", tick.Format(time.TimeOnly))
	}

	code, out, errOut = runCLI(t, append(args, "--include-paused")...)
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, fmt.Sprintf(`backfill tick: \d+ ticks: ran %d, already done \d+, failed 0, run elsewhere 0, skipped while paused 0\n`, len(paused)), out)
	runs = backfilled()
	for _, tick := range paused {
		assert.Equal(t, 1, runs[tick.UnixMilli()], "tick %s, skipped while paused, with --include-paused", tick.Format(time.TimeOnly))
	}
}
