//go:build unix

package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/scheduler"
)

// A run's output is kept with its history record, its last output_keep bytes: `cronlock
// history --output`, the JSON history and the job's page show it, the last two only with the
// token.
func TestOutputKeptWithTheRun(t *testing.T) {
	t.Setenv("CRONLOCK_TEST_TOKEN", "s3cret")
	// About 10 KB of output, of which the last 1 KiB is kept.
	d := startDaemon(t, "http_token_env: CRONLOCK_TEST_TOKEN\n", `  - name: chatty
    schedule: "@yearly"
    output_keep: 1KiB
    command: ["sh", "-c", "echo FIRST; i=0; while [ $i -lt 200 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done"]
`)
	code, out, errOut := runCLI(t, "trigger", "chatty", "--config", d.cfg, "--by", "tester")
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	proctest.Eventually(t, "the manual run in the history", func() bool {
		code, out, _ := runCLI(t, "history", "chatty", "--config", d.cfg)
		return code == 0 && strings.Contains(out, "trigger "+id)
	})

	code, out, errOut = runCLI(t, "history", "chatty", "--config", d.cfg)
	require.Equal(t, 0, code, errOut)
	assert.NotContains(t, out, "line-199", "without --output, no output")
	code, out, errOut = runCLI(t, "history", "chatty", "--config", d.cfg, "--output")
	require.Equal(t, 0, code, errOut)
	_, kept, ok := strings.Cut(out, "\noutput of trigger "+id+" by tester, token ")
	require.True(t, ok, out)
	assert.Regexp(t, `^\d+ on web-1 \(1024 bytes\):\n`, kept)
	assert.Contains(t, kept, "\n  line-199-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", "the last line, indented")
	assert.NotContains(t, kept, "FIRST", "only the last 1 KiB")

	var h []scheduler.Record
	status, body := get(t, d.base+"/jobs/chatty/history")
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &h))
	require.Len(t, h, 1)
	assert.Empty(t, h[0].Output, "no output without the token")
	status, body, _ = do(t, newRequest(t, http.MethodGet, d.base+"/jobs/chatty/history", "s3cret", nil))
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &h))
	require.Len(t, h, 1)
	assert.Len(t, h[0].Output, 1024)
	assert.True(t, strings.HasSuffix(h[0].Output, "line-199-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n"), h[0].Output)

	_, page := get(t, d.base+"/jobs/chatty")
	assert.NotContains(t, page, "line-199", "the page without the token")
	_, page, _ = do(t, newRequest(t, http.MethodGet, d.base+"/jobs/chatty", "s3cret", nil))
	assert.Contains(t, page, "<details><summary>output (1024 bytes kept)</summary><pre>")
	assert.Contains(t, page, "line-199-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n</pre>")
}
