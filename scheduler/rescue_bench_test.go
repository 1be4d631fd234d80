package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/scheduler"
)

// putInFlight writes, on the nodes on, the in-flight record of an attempt of the job name at
// tick with token, held by replica, whose lock is lockKey with the value value, as a run
// writes it when its handler starts; it returns the record's field.
func putInFlight(tb testing.TB, on []redis.Cmdable, name string, tick time.Time, token uint64, replica, lockKey, value string) string {
	tb.Helper()
	field := strconv.FormatInt(tick.UnixMilli(), 10) + "/" + strconv.FormatUint(token, 10)
	rec, err := json.Marshal(map[string]any{"tick": tick.UnixMilli(), "planned": tick.UnixMicro(), "attempt": 1, "replica": replica, "pid": 1,
		"start": tick.UnixMicro(), "token": token, "key": lockKey, "value": value})
	require.NoError(tb, err)
	for _, n := range on {
		require.NoError(tb, n.HSet(context.Background(), layout.RunningKey(middleware.DefaultPrefix, name), field, rec).Err())
	}
	return field
}

// putLock writes, on the nodes on, the lock key with the value value as redlock writes it,
// kept as a done marker if done.
func putLock(tb testing.TB, on []redis.Cmdable, key, value string, done bool) {
	tb.Helper()
	fields := []any{layout.FieldValue, value}
	if done {
		fields = append(fields, layout.FieldState, layout.StateDone)
	}
	for _, n := range on {
		require.NoError(tb, n.HSet(context.Background(), key, fields...).Err())
	}
}

// nodes returns clients of the nodes of c numbered on; of every node without on.
func (c *cluster) nodes(on ...int) []redis.Cmdable {
	var out []redis.Cmdable
	for i, s := range c.Servers {
		if on == nil || slices.Contains(on, i) {
			out = append(out, s.Client())
		}
	}
	return out
}

// One look of the rescuer of a scheduler with 10,000 jobs on 3 nodes, 10 of them with a run in
// flight: 8 whose locks are held, 2 whose holders vanished (found suspect, not yet
// interrupted). It reports the scripts sent to each node per look.
func BenchmarkRescue10kJobs(b *testing.B) {
	c := newCluster(b, 3, false)
	counter := newRoundTrips(b)
	s := newScheduler(b, countedClient(b, c, counter))
	const jobs = 10000
	for i := range jobs {
		require.NoError(b, s.Add(job.Job{Name: fmt.Sprint("job-", i), Spec: "@every 10s", Handler: func(context.Context) error { return nil }}))
	}
	tick := time.UnixMilli(1700000000000)
	for i := range 10 {
		name := fmt.Sprint("job-", i*jobs/10+jobs/20)
		lock := layout.TickKey(middleware.DefaultPrefix, name, tick)
		putInFlight(b, c.nodes(), name, tick, uint64(i+1), "bench", lock, "v")
		if i < 8 {
			putLock(b, c.nodes(), lock, "v", false)
		}
	}
	ctx := context.Background()
	require.Len(b, scheduler.Rescue(ctx, s, nil), 2) // the scripts are loaded on the nodes
	before := counter.snapshot()
	b.ResetTimer()
	for range b.N {
		scheduler.Rescue(ctx, s, nil)
	}
	b.StopTimer()
	after := counter.snapshot()
	scripts := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	b.ReportMetric(float64(scripts)/float64(b.N)/float64(len(c.Servers)), "scripts/node/look")
}
