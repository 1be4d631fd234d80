//go:build unix

package main

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/internal/hashslot"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/redistest"
)

// lastTick returns the tick of the newest entry pushed to the ledger.
func lastTick(t *testing.T, ledger *redistest.Server) int64 {
	t.Helper()
	raw, err := ledger.Client().LIndex(context.Background(), "ledger", -1).Result()
	require.NoError(t, err)
	var tick int64
	_, err = fmt.Sscan(raw, &tick)
	require.NoError(t, err, "ledger entry %q", raw)
	return tick
}

// clustersConfig returns the nodes: of a config whose nodes are clusters.
func clustersConfig(clusters []*redistest.Cluster) string {
	var b strings.Builder
	b.WriteString("nodes:\n")
	for _, c := range clusters {
		var addrs []string
		for _, a := range c.Addrs() {
			addrs = append(addrs, strconv.Quote(a))
		}
		fmt.Fprintf(&b, "  - cluster: [%s]\n", strings.Join(addrs, ", "))
	}
	return b.String()
}

// Three Redis Clusters as the lock nodes of two `cronlock run` in this process: check sees every
// slot without a marker, --end-quarantine writes them all, the shell job then runs once per tick,
// locks finds its keys on the primary of the job's slot, and /readyz is ready. A primary of one
// Cluster restarted empty: the next lock attempt puts the job's slot there in quarantine, which
// /readyz and check report (the member's other slots without a marker, the other Clusters
// untouched), while the two other Clusters make the quorum and every tick still runs once.
func TestClusterNodes(t *testing.T) {
	clusters := redistest.StartClusters(t, 3, 2, redistest.Config{})
	ledger := redistest.Start(t, redistest.Config{})
	dir := t.TempDir()
	const every = 500 * time.Millisecond
	cfg := writeFile(t, dir, "c.yaml", clustersConfig(clusters)+tickLedgerJob(every, ledger))
	ctx := context.Background()
	slot := hashslot.Of(layout.RunKey("cronlock", "ledger"))
	jobMember := clusters[0].Member(slot) // the member of cluster 0 that serves the job's keys
	jobAddr := clusters[0].Members()[jobMember].Addr()
	otherAddr := clusters[0].Members()[1-jobMember].Addr()

	code, out, _ := runCLI(t, "validate", "--config", cfg)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "nodes: 3, quorum 2: cluster("+clusters[0].Addrs()[0]+", ")

	// New Clusters: no slot has a marker.
	code, out, _ = runCLI(t, "check", "--config", cfg)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "  answers     yes, cluster_state ok, 16384 of 16384 slots served\n")
	assert.Contains(t, out, "  members     2 primaries (2 answer), 0 replicas or others\n")
	assert.Contains(t, out, "  quarantine  16384 slots: 0 out of quarantine, 16384 without boot marker (slots 0-16383)\n")
	assert.Contains(t, out, "member "+clusters[0].Addrs()[0]+"\n    role        primary, slots 0-8191 (8192)\n    answers     yes, PING ")
	assert.Contains(t, out, "    eviction    maxmemory-policy noeviction\n")
	assert.Contains(t, out, "    quarantine  8192 slots: 0 out of quarantine, 8192 without boot marker (slots 8192-16383)\n")
	assert.Contains(t, out, "- cluster("+strings.Join(clusters[1].Addrs(), ", ")+"): member "+clusters[1].Addrs()[1]+": 8192 of its slots have no boot marker (slots 8192-16383): the member is new, or restarted without its data;")
	assert.Contains(t, out, "3 of 3 nodes answer, quorum 2\n")

	code, out, _ = runCLI(t, "check", "--config", cfg, "--end-quarantine")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "quarantine ended on every node (the boot markers of all 16384 hash slots, cronlock:boot:{")
	assert.Contains(t, out, "  quarantine  16384 slots: 16384 out of quarantine\n")
	assert.Contains(t, out, "    quarantine  8192 slots: 8192 out of quarantine\n")
	assert.Contains(t, out, "3 of 3 nodes answer, quorum 2\nno warnings\n")

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stderrs [2]proctest.SyncBuffer
	codes := make(chan int, 2)
	for i := range stderrs {
		go func() {
			var stdout proctest.SyncBuffer
			codes <- run(runCtx, []string{"run", "--config", cfg, "--replica", fmt.Sprintf("r%d", i), "--http", "127.0.0.1:0"}, &stdout, &stderrs[i])
		}()
	}
	addr := regexp.MustCompile(`msg="http: serving /healthz /readyz /jobs /metrics" addr=(\S+)`)
	var metrics [2]string
	for i := range stderrs {
		proctest.Eventually(t, "the HTTP server", func() bool { return addr.MatchString(stderrs[i].String()) })
		metrics[i] = "http://" + addr.FindStringSubmatch(stderrs[i].String())[1] + "/metrics"
	}
	readyz := "http://" + addr.FindStringSubmatch(stderrs[0].String())[1] + "/readyz"
	proctest.Eventually(t, "ready", func() bool {
		status, body := get(t, readyz)
		return status == http.StatusOK && strings.Contains(body, "ready: 3 of 3 nodes answer and are out of quarantine, quorum 2")
	})
	proctest.Eventually(t, "five runs", func() bool { return ledger.Client().LLen(ctx, "ledger").Val() >= 5 })

	code, out, _ = runCLI(t, "locks", "--config", cfg, "--job", "ledger")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "keys {cronlock:ledger}:* on 3 nodes (quorum 2): cluster(")
	assert.Regexp(t, `ledger +tick \S+ +`+regexp.QuoteMeta(jobAddr)+` +done +r[01] +\d+ `, out, "a done tick on the primary of the job's slot")

	// The primary of the job's slot in cluster 0 restarts empty: the next lock attempt starts
	// the slot's quarantine there.
	before := ledger.Client().LLen(ctx, "ledger").Val()
	restarted := time.Now()
	require.NoError(t, clusters[0].Restart(jobMember))
	proctest.Eventually(t, "cluster 0 in quarantine, still ready", func() bool {
		status, body := get(t, readyz)
		return status == http.StatusOK && strings.Contains(body, "ready: 2 of 3 nodes answer and are out of quarantine, quorum 2") &&
			strings.Contains(body, "nodes[0]: in quarantine until ") && // the addresses go with the token

			strings.Contains(body, " (1 of the jobs' 1 hash slots): it refuses locks until then")
	})
	proctest.Eventually(t, "five more runs", func() bool { return ledger.Client().LLen(ctx, "ledger").Val() >= before+5 })

	code, out, _ = runCLI(t, "check", "--config", cfg)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "  quarantine  16384 slots: 8192 out of quarantine, 1 IN QUARANTINE for up to ")
	assert.Contains(t, out, ", 8191 without boot marker (slots ")
	assert.Contains(t, out, "- cluster("+strings.Join(clusters[0].Addrs(), ", ")+"): member "+jobAddr+": 1 of its slots are in quarantine for up to ")
	assert.Contains(t, out, "- cluster("+strings.Join(clusters[0].Addrs(), ", ")+"): member "+jobAddr+": 8191 of its slots have no boot marker")
	assert.NotContains(t, out, "member "+otherAddr+": ", "the member that kept its data has no warning")
	assert.Equal(t, 2, strings.Count(out, "\n- "), "the restarted member's warnings only")

	// Every tick is run at most once, with increasing fencing tokens. A tick may be missed only
	// if a replica says why: on a loaded machine a 500ms tick may not get its lock within its
	// window (skipped_late), or not from a quorum (quorum_unavailable), the run of the tick
	// before may still be going on (skipped_overlap: the job forbids overlap; seen beside a CPU
	// hog, where a run's redis-cli took longer than a period), or the scheduler may wake up
	// after the next tick and fire only that one (ticks missed). Misses are counted up
	// to last, a tick after which two more ran; the test waits (bounded) for the replicas'
	// reports of them, which a starved replica may send after a later tick ran.
	last := lastTick(t, ledger)
	proctest.Eventually(t, "two ticks after the last checked", func() bool { return lastTick(t, ledger) > last+every.Milliseconds() })
	var counts []string // the replicas' outcome counts of the job, for the failure message
	explained := func() int {
		n := 0
		counts = counts[:0]
		for _, url := range metrics {
			status, body := get(t, url)
			require.Equal(t, http.StatusOK, status, body)
			counts = append(counts, regexp.MustCompile(`(?m)^cronlock_job_(runs|ticks_missed)_total\{[^}]*cronlock_job="ledger".*$`).FindAllString(body, -1)...)
			for _, series := range []string{
				`cronlock_job_runs_total\{cronlock_job="ledger",cronlock_outcome="` + outcome.SkippedLate + `"\}`,
				`cronlock_job_runs_total\{cronlock_job="ledger",cronlock_outcome="` + outcome.QuorumUnavailable + `"\}`,
				`cronlock_job_runs_total\{cronlock_job="ledger",cronlock_outcome="` + outcome.SkippedOverlap + `"\}`,
				`cronlock_job_ticks_missed_total\{[^}]*cronlock_job="ledger"[^}]*\}`, // the replica's scheduler fell behind
			} {
				m := regexp.MustCompile(`(?m)^` + series + ` (\d+)$`).FindStringSubmatch(body)
				require.NotNil(t, m, "%s in:\n%s", series, body)
				v, err := strconv.Atoi(m[1])
				require.NoError(t, err)
				n += v
			}
		}
		return n
	}
	missedUpToLast := func() []int64 {
		_, missed := ledgerWithMisses(t, ledger, every)
		return slices.DeleteFunc(missed, func(m int64) bool { return m > last })
	}
	reported := explained()
	for deadline := time.Now().Add(proctest.WaitLimit); reported < len(missedUpToLast()) && time.Now().Before(deadline); reported = explained() {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	for range stderrs {
		assert.Equal(t, 0, <-codes, "stderr:\n%s\n%s", stderrs[0].String(), stderrs[1].String())
	}
	entries, missed := ledgerWithMisses(t, ledger, every)
	missed = slices.DeleteFunc(missed, func(m int64) bool { return m > last })
	assert.LessOrEqual(t, len(missed), reported, "ticks missed (cluster 0 restarted at %d) that no replica reported skipped_late, quorum_unavailable, skipped_overlap or missed: %v; the replicas' counts:\n%s",
		restarted.UnixMilli(), missed, strings.Join(counts, "\n"))
	t.Logf("%d ticks, %d missed, %d reported by the replicas (cluster 0 restarted at %d): %v", len(entries), len(missed), reported, restarted.UnixMilli(), missed)

	// A primary of cluster 2 is down: that node does not count as answering, for check and
	// for locks.
	require.NoError(t, clusters[2].Members()[0].Kill())
	code, out, _ = runCLI(t, "check", "--config", cfg, "--timeout", "1s")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "  members     2 primaries (1 answer), 0 replicas or others\n")
	assert.Contains(t, out, "- cluster("+strings.Join(clusters[2].Addrs(), ", ")+"): member "+clusters[2].Addrs()[0]+": does not answer (")
	assert.Contains(t, out, "2 of 3 nodes answer, quorum 2\n")
	code, out, _ = runCLI(t, "locks", "--config", cfg, "--timeout", "1s")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "cluster("+strings.Join(clusters[2].Addrs(), ", ")+") (error: ")
}
