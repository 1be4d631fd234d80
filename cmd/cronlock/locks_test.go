package main

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// locks reads each key by its type: the locks (hashes), the fencing counter, a pause and the
// count of a tick's attempts (strings), the run history (a stream) with its length, the runs
// in flight (a hash) with their number; the history's markers are counted,
// not listed; a key of another type under the prefix is shown with its type. No key is read
// with a command of another type (no WRONGTYPE row).
func TestLocksReadsEachKeyByItsType(t *testing.T) {
	node := redistest.Start(t, redistest.Config{})
	endQuarantine(t, node)
	ctx := context.Background()

	// Two runs of a job leave its tick keys, fence, history and history markers; then it is
	// paused.
	locks, err := redlock.New([]redlock.Node{node.Client()})
	require.NoError(t, err)
	s, err := scheduler.New(locks, scheduler.WithReplica("r1"))
	require.NoError(t, err)
	require.NoError(t, s.Add(job.Job{Name: "j", Spec: "@every 100ms", Handler: func(context.Context) error { return nil }}))
	require.NoError(t, s.Start())
	history := layout.HistoryKey(middleware.DefaultPrefix, "j")
	proctest.Eventually(t, "two runs in the history", func() bool { return node.Client().XLen(ctx, history).Val() >= 2 })
	require.NoError(t, s.Control().Pause(ctx, "j", "disk full"))
	require.NoError(t, s.Stop(ctx))
	require.NoError(t, locks.Close())
	records := node.Client().XLen(ctx, history).Val()
	markers := len(node.Client().Keys(ctx, history+":*").Val())
	require.Positive(t, markers)
	require.NoError(t, node.Client().RPush(ctx, "{cronlock:j}:notes", "a list").Err())
	require.NoError(t, node.Client().HSet(ctx, "{cronlock:j}:running", "1/2", "{}", "1/3", "{}").Err()) // two runs in flight
	require.NoError(t, node.Client().Expire(ctx, history, time.Hour).Err())

	cfg := writeFile(t, t.TempDir(), "c.yaml", nodesConfig([]*redistest.Server{node})+`jobs: [{name: j, schedule: "@hourly", command: ["true"]}]
`)
	code, out, errOut := runCLI(t, "locks", "--config", cfg)
	require.Equal(t, 0, code, out+errOut)
	t.Log("\n" + out)
	assert.NotContains(t, out, "WRONGTYPE")
	assert.NotContains(t, out, "error")
	assert.Regexp(t, regexp.QuoteMeta(node.Addr())+` \(\d+ keys; `+regexp.QuoteMeta(strconv.Itoa(markers))+` history markers not listed\)`, out)
	assert.Regexp(t, `j +tick \S+ +\S+ +done +r1 +\d+ `, out)
	assert.Regexp(t, `j +fence +\S+ +- +- +\d+ +none`, out)
	assert.Regexp(t, `j +attempts \d{4}-\d\d-\d\dT\S+Z +\S+ +1 attempt +- +- +[\dms.]+ +-`, out, "the count of a tick's attempts across the cluster")
	assert.NotContains(t, out, "}:attempts:", "an attempts key listed as a key of another kind")
	assert.Regexp(t, `j +paused +\S+ +paused +r1 +- +none +"disk full"`, out)
	assert.Regexp(t, `j +history +\S+ +`+strconv.FormatInt(records, 10)+` records +- +- +(59m[\d.]+s|1h0m0s) +-`, out)
	assert.Regexp(t, `j +running +\S+ +2 in flight +- +- +none +-`, out)
	assert.Regexp(t, `j +\{cronlock:j\}:notes +\S+ +list +- +- +none +-`, out)
	assert.NotRegexp(t, `history:`, out, "a history marker was listed")
}
