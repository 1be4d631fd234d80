//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/scheduler"
)

// A command failing under `retries: 1` leaves one record per attempt: attempts 1 and 2 of a
// tick, each with its own error and token, in GET /jobs/{name}/history and `cronlock history`,
// and nothing else.
func TestHistoryShowsEachAttempt(t *testing.T) {
	t.Setenv("CRONLOCK_TEST_TOKEN", "s3cret")
	d := startDaemon(t, "http_token_env: CRONLOCK_TEST_TOKEN\n", `  - name: disk
    schedule: "@every 3s"
    retries: 1
    command: ["sh", "-c", "echo disk full on attempt $CRONLOCK_ATTEMPT >&2; exit 1"]
`)
	var h []scheduler.Record
	byTick := map[time.Time][]scheduler.Record{}
	proctest.Eventually(t, "a tick with its two attempts in /jobs/disk/history", func() bool {
		h = historyJSON(t, d.base+"/jobs/disk/history?n=50", "s3cret")
		clear(byTick)
		for _, r := range h {
			byTick[r.Tick] = append(byTick[r.Tick], r)
		}
		for _, rs := range byTick {
			if len(rs) == 2 {
				return true
			}
		}
		return false
	})
	for tick, rs := range byTick {
		require.LessOrEqual(t, len(rs), 2, "tick %s: no records but its attempts: %+v", tick, rs)
		for i, r := range rs { // newest first
			assert.Equal(t, len(rs)-i, r.Attempt, "tick %s", tick)
			assert.Equal(t, "failed", r.Outcome)
			assert.Contains(t, r.Error, fmt.Sprintf("disk full on attempt %d", r.Attempt))
			assert.NotZero(t, r.Token)
		}
		if len(rs) == 2 {
			assert.Less(t, rs[1].Token, rs[0].Token, "each attempt has its own token")
		}
	}
	code, out, errOut := runCLI(t, "history", "disk", "--config", d.cfg, "-n", "50")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `RUN\s+ATTEMPT\s+OUTCOME`, out)
	assert.Regexp(t, regexp.MustCompile(`(?m)tick \S+\s+2\s+failed .*disk full on attempt 2$`), out)
	assert.Regexp(t, regexp.MustCompile(`(?m)tick \S+\s+1\s+failed .*disk full on attempt 1$`), out)
	assert.NotContains(t, out, "attempts are used up")

	// The console groups a tick's attempts under it: one Run cell spanning its rows.
	status, page := get(t, d.base+"/jobs/disk")
	require.Equal(t, http.StatusOK, status)
	assert.Regexp(t, `<td class="run" rowspan="2">tick [^<]+</td><td>2</td><td class="outcome failed">`, page)
	assert.Regexp(t, `<tr class="record attempt"><td>[^<]+</td><td>1</td><td class="outcome failed">`, page)
}

// historyJSON reads a GET /jobs/{name}/history with the bearer token.
func historyJSON(t *testing.T, url, token string) []scheduler.Record {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var h []scheduler.Record
	require.NoError(t, json.Unmarshal(b, &h))
	return h
}
