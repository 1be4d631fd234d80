//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/internal/redistest"
)

// overlap: replace, with three daemons on three real nodes: a job every 5 s whose run takes
// 12 s. Each tick stops the run under way (SIGTERM to its process group) and starts once it is
// gone: the flock ledger shows no two runs alive at once, ever, and one run per tick, 5 s
// apart, each on a daemon of its own choosing; the runs cut short are logged as replaced.
func TestReplaceDaemons(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger")
	cfg := writeFile(t, dir, "c.yaml", nodesConfig(nodes)+`kill_grace: 2s
jobs:
  - {name: long, schedule: '*/5 * * * * *', overlap: replace, command: `+ledgerJob(ledger, `echo $CRONLOCK_TICK_UNIX_MS >> "$0.ticks"; sleep 12`)+`}
`)
	var procs []*proc
	for i := range 3 {
		p := startProc(t, bin, fmt.Sprintf("r%d", i), nil, "run", "--config", cfg, "--replica", fmt.Sprintf("r%d", i))
		procs = append(procs, p)
		t.Cleanup(func() { p.signal(t, syscall.SIGTERM); p.wait(t) })
	}
	const runs = 4
	// In two waits: the first run may be up to a tick away, and each wait is bounded.
	proctest.Eventually(t, "2 runs", func() bool { return len(readLedger(t, ledger)) >= runs/2 })
	proctest.Eventually(t, "4 runs", func() bool { return len(readLedger(t, ledger)) >= runs })
	data, err := os.ReadFile(ledger + ".ticks")
	require.NoError(t, err)
	ticks := strings.Fields(string(data))
	require.GreaterOrEqual(t, len(ticks), runs)
	for i := 1; i < runs; i++ {
		prev, _ := strconv.ParseInt(ticks[i-1], 10, 64)
		cur, err := strconv.ParseInt(ticks[i], 10, 64)
		require.NoError(t, err)
		assert.Equal(t, int64(5000), cur-prev, "runs %d and %d are not of consecutive ticks: a tick did not run (%v)", i-1, i, ticks)
	}
	replaced := 0
	for _, p := range procs {
		replaced += strings.Count(p.out.String(), "outcome=replaced")
	}
	assert.GreaterOrEqual(t, replaced, runs-2, "runs logged as replaced")
	tokens := map[string]bool{}
	for _, f := range ledgerLines(t, ledger) {
		_, err := strconv.ParseUint(f[2], 10, 64)
		require.NoError(t, err)
		assert.False(t, tokens[f[2]], "fencing token %s twice", f[2])
		tokens[f[2]] = true
	}
}
