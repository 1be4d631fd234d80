//go:build unix

package main

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/web"
)

// The cost of the console and of the metrics on the nodes, with 500 jobs on 3 nodes (or
// $CRONLOCK_COST_JOBS): the commands the nodes receive for one view of the overview, of a job's
// page, and one scrape of /metrics, each with the cache out of date; then both pages again
// within the cache's life, which cost nothing more. The daemon's heartbeats (one script per node
// each) come at its start only, and its looks for vanished runs not at all. docs/observability.md gives the numbers:
//
//	go test -race -count=1 -run ConsoleCost -v ./cmd/cronlock/ | grep cost
func TestConsoleCost(t *testing.T) {
	jobs := 500
	if s := os.Getenv("CRONLOCK_COST_JOBS"); s != "" {
		var err error
		jobs, err = strconv.Atoi(s)
		require.NoError(t, err, "CRONLOCK_COST_JOBS")
	}
	var b strings.Builder
	for i := range jobs {
		fmt.Fprintf(&b, "  - {name: job-%03d, schedule: '@yearly', command: ['true']}\n", i)
	}
	// Its heartbeats at start only, and no look for vanished runs (one script per job per node)
	// while the pages are counted.
	d := startDaemon(t, "", b.String(), "--heartbeat", "1h", "--rescue-every", "1h")
	get := func(path string) string {
		status, body, _ := do(t, newRequest(t, "GET", d.base+path, "", nil))
		require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
		return body
	}
	get("/") // the scripts are loaded
	// pageScripts counts the scripts the nodes ran but the scheduler's poll of the queue of
	// manual runs (one script per node about once a second, whenever it comes), known by the
	// ZREMRANGEBYSCORE that only its script runs, counted in the same INFO reply as the scripts
	// (a script is atomic): the count is the pages' own, exact.
	pageScripts := func() int { return settledCalls(t, d.nodes, scripts, triggerPolls) }
	per := float64(jobs * len(d.nodes))
	perView := map[string]int{}
	unread := 0 // jobs the scrape left out: its reads are bounded by 2 s, which an overloaded machine can pass
	for _, path := range []string{"/", "/jobs/job-000", "/metrics"} {
		time.Sleep(web.PageCache) // the cached read is out of date
		s0, c0 := pageScripts(), nodeCalls(t, d.nodes, commands)
		body := get(path)
		s1, c1 := pageScripts(), nodeCalls(t, d.nodes, commands)
		if path == "/metrics" {
			m := regexp.MustCompile(`(?m)^cronlock_jobs_unread (\d+)$`).FindStringSubmatch(body)
			require.NotNil(t, m, "the scrape says how many jobs it left out")
			unread, _ = strconv.Atoi(m[1])
			require.Equal(t, jobs-unread, strings.Count(body, "\ncronlock_job_paused{"), "a job read has its gauges, a job left out has none")
		}
		perView[path] = s1 - s0
		t.Logf("cost: GET %s, %d jobs, %d nodes: %d scripts (%.2f per job per node), %d commands in all (with the readiness probe's and the trigger poll's)",
			path, jobs, len(d.nodes), s1-s0, float64(s1-s0)/per, c1-c0)
	}
	require.Positive(t, perView["/"], "a view of the overview reads the nodes")
	require.Equal(t, len(d.nodes)*jobs+len(d.nodes), perView["/"], "one script per job per node, and one per node for the replicas")
	if unread == 0 {
		require.Equal(t, len(d.nodes)*jobs, perView["/metrics"], "one script per job per node")
	} else { // a job left out may have been read on some nodes when the bound passed
		t.Logf("cost: the scrape left out %d of %d jobs", unread, jobs)
		require.Less(t, unread, jobs, "the scrape read no job")
		require.GreaterOrEqual(t, perView["/metrics"], len(d.nodes)*(jobs-unread), "one script per job per node")
		require.LessOrEqual(t, perView["/metrics"], len(d.nodes)*jobs, "one script per job per node")
	}

	time.Sleep(web.PageCache)
	s0 := pageScripts()
	start := time.Now()
	get("/")
	get("/jobs/job-001")
	get("/?q=job-1")
	if time.Since(start) < web.PageCache { // else the cache ran out between them: nothing to see
		s1 := pageScripts()
		t.Logf("cost: the overview, a job's page and a filtered overview within %v: %d scripts", web.PageCache, s1-s0)
		require.Equal(t, len(d.nodes)*jobs+len(d.nodes), s1-s0, "the pages share one read")
	}
}
