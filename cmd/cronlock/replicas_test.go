//go:build unix

package main

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/internal/redistest"
)

// connectedReplicas is the primary's count of connected replicas (INFO replication).
func connectedReplicas(t *testing.T, primary *redistest.Server) string {
	t.Helper()
	info, err := primary.Client().Info(context.Background(), "replication").Result()
	if err != nil {
		return ""
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			return v
		}
	}
	return ""
}

// tickConfig writes a config of settings and a job that ticks every second, and returns its
// path and a count of the runs so far.
func tickConfig(t *testing.T, settings string) (string, func() int) {
	t.Helper()
	dir := t.TempDir()
	ledger := dir + "/ledger"
	cfg := writeFile(t, dir, "c.yaml", settings+`jobs:
  - name: tick
    schedule: "@every 1s"
    command: [sh, -c, 'echo "$CRONLOCK_TICK" >> "$0"', `+ledger+`]
`)
	return cfg, func() int {
		data, err := os.ReadFile(ledger)
		if os.IsNotExist(err) {
			return 0
		}
		require.NoError(t, err)
		return strings.Count(string(data), "\n")
	}
}

// wait_for_replicas: a lock counts on a node only once its replicas acknowledged it.
func TestWaitForReplicas(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	primaries := redistest.StartN(t, 3, redistest.Config{})
	replicas := make([]*redistest.Server, len(primaries))
	for i, p := range primaries {
		host, port, err := net.SplitHostPort(p.Addr())
		require.NoError(t, err)
		replicas[i] = redistest.Start(t, redistest.Config{Args: []string{"--replicaof", host, port}})
	}
	allConnected := func(want string, ps ...*redistest.Server) func() bool {
		return func() bool {
			for _, p := range ps {
				if connectedReplicas(t, p) != want {
					return false
				}
			}
			return true
		}
	}
	proctest.Eventually(t, "every primary's replica to connect", allConnected("1", primaries...))
	endQuarantine(t, primaries...)
	cfg, runs := tickConfig(t, nodesConfig(primaries)+"wait_for_replicas: 1\n")

	code, out := runBin(t, bin, nil, "check", "--config", cfg)
	require.Equal(t, 0, code, out)
	require.Equal(t, 3, strings.Count(out, "replicas    1 connected, wait_for_replicas 1"), out)

	d := startProc(t, bin, "daemon", nil, "run", "--config", cfg, "--replica", "a")
	proctest.Eventually(t, "ticks to run with every replica up", func() bool { return runs() >= 2 })

	for _, r := range replicas[:2] {
		require.NoError(t, r.Stop())
	}
	proctest.Eventually(t, "two primaries to see their replica gone", allConnected("0", primaries[:2]...))
	code, out = runBin(t, bin, nil, "check", "--config", cfg)
	require.Equal(t, 0, code, out)
	require.Equal(t, 2, strings.Count(out, "0 replicas connected, fewer than wait_for_replicas 1"), out)
	// A run that took its lock before the replicas stopped may still write: count from the
	// first tick that ended unreplicated, then see two more end so, with no run between.
	unreplicated := func() int { return strings.Count(d.out.String(), "outcome=quorum_unavailable") }
	proctest.Eventually(t, "a tick to end quorum_unavailable", func() bool { return unreplicated() >= 1 })
	before, seen := runs(), unreplicated()
	proctest.Eventually(t, "two more ticks to end quorum_unavailable", func() bool { return unreplicated() >= seen+2 })
	require.Equal(t, before, runs(), "a tick ran while two of three nodes had no replica to acknowledge it")
	d.waitLog(t, "not replicated")

	for _, r := range replicas[:2] {
		require.NoError(t, r.Restart())
	}
	proctest.Eventually(t, "the replicas to connect again", allConnected("1", primaries...))
	before = runs()
	proctest.Eventually(t, "ticks to run again", func() bool { return runs() >= before+2 })
}

// wait_for_replicas per node: on three primaries where only node 1 has a replica, node 1 waits
// for it and the others for none. Ticks run; with its replica stopped node 1's yes no longer
// counts, nodes 0 and 2 still make a quorum, and check warns for node 1 only.
func TestWaitForReplicasPerNode(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	primaries := redistest.StartN(t, 3, redistest.Config{})
	host, port, err := net.SplitHostPort(primaries[1].Addr())
	require.NoError(t, err)
	replica := redistest.Start(t, redistest.Config{Args: []string{"--replicaof", host, port}})
	proctest.Eventually(t, "node 1's replica to connect", func() bool { return connectedReplicas(t, primaries[1]) == "1" })
	endQuarantine(t, primaries...)
	cfg, runs := tickConfig(t, `nodes:
  - "`+primaries[0].Addr()+`"
  - {addr: "`+primaries[1].Addr()+`", wait_for_replicas: 1}
  - "`+primaries[2].Addr()+`"
`)

	code, out := runBin(t, bin, nil, "check", "--config", cfg)
	require.Equal(t, 0, code, out)
	require.Equal(t, 1, strings.Count(out, "replicas    1 connected, wait_for_replicas 1"), out)
	require.Equal(t, 2, strings.Count(out, "replicas    0 connected, wait_for_replicas 0"), out)
	require.NotContains(t, out, "fewer than wait_for_replicas", out)

	startProc(t, bin, "daemon", nil, "run", "--config", cfg, "--replica", "a")
	proctest.Eventually(t, "ticks to run with node 1's replica up", func() bool { return runs() >= 2 })

	require.NoError(t, replica.Stop())
	proctest.Eventually(t, "node 1 to see its replica gone", func() bool { return connectedReplicas(t, primaries[1]) == "0" })
	code, out = runBin(t, bin, nil, "check", "--config", cfg)
	require.Equal(t, 0, code, out)
	require.Equal(t, 1, strings.Count(out, "0 replicas connected, fewer than wait_for_replicas 1"), out)
	before := runs()
	proctest.Eventually(t, "ticks to run on nodes 0 and 2", func() bool { return runs() >= before+2 })
}
