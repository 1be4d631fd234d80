package scheduler_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/scheduler"
)

// keysOf returns, per node, the keys that match pattern.
func (c *cluster) keysOf(t *testing.T, pattern string) [][]string {
	t.Helper()
	var out [][]string
	for _, s := range c.Servers {
		keys, err := s.Client().Keys(context.Background(), pattern).Result()
		require.NoError(t, err)
		out = append(out, keys)
	}
	return out
}

// Forget removes every key a job left on every node, and its waiting manual runs, and leaves
// other jobs alone, also one whose name the forgotten one matches as a glob; a job added again
// afterwards gets tokens above those of before.
func TestForgetRemovesWhatAJobLeft(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	s := newScheduler(t, c.client(t, false), scheduler.WithReplica("r0"), scheduler.WithMiddleware(led.observe()))
	for _, name := range []string{"gone", "kept"} {
		require.NoError(t, s.Add(job.Job{Name: name, Spec: "@every 1s", Options: job.Options{LockTTL: 2 * time.Second},
			Handler: led.handler(func(context.Context) error { return nil })}))
	}
	require.NoError(t, s.Start())
	ran := func(name string) func(event) bool { return func(e event) bool { return e.Job == name } }
	led.waitEvent(t, "a run of gone", ran("gone"))
	led.waitEvent(t, "a run of kept", ran("kept"))
	ctx := ctxT(t)
	require.NoError(t, s.Stop(ctx))
	_, events := led.snapshot()

	ctl, err := scheduler.NewControl(c.client(t, false), scheduler.WithReplica("admin"))
	require.NoError(t, err)
	require.NoError(t, ctl.Pause(ctx, "gone", "retired"))
	_, err = ctl.Trigger(ctx, "gone")
	require.NoError(t, err)
	_, err = ctl.Trigger(ctx, "kept")
	require.NoError(t, err)
	const goneKeys, keptKeys = "{cronlock:gone}:*", "{cronlock:kept}:*"
	for _, srv := range c.Servers { // a run in flight whose replica vanished, not recorded yet
		require.NoError(t, srv.Client().HSet(ctx, "{cronlock:gone}:running", "1/2", "{}").Err())
	}
	for i, keys := range c.keysOf(t, goneKeys) {
		for _, suffix := range []string{":fence", ":history", ":paused"} {
			require.Contains(t, keys, "{cronlock:gone}"+suffix, "node %d", i)
		}
	}
	for _, srv := range c.Servers { // a request queued by an older version, without who asked
		require.NoError(t, srv.Client().ZAdd(ctx, layout.TriggersKey(middleware.DefaultPrefix), redis.Z{Score: float64(time.Now().UnixMilli()), Member: "1-00 gone"}).Err())
	}
	kept := c.keysOf(t, keptKeys)

	require.NoError(t, ctl.Forget(ctx, "k*"), "no job of that name: nothing to do")
	require.Equal(t, kept, c.keysOf(t, keptKeys), "a glob in the name is taken literally")

	require.NoError(t, ctl.Forget(ctx, "gone"))
	for i, keys := range c.keysOf(t, goneKeys) {
		assert.Empty(t, keys, "node %d", i)
	}
	assert.Equal(t, kept, c.keysOf(t, keptKeys), "kept's keys are untouched")
	for i, srv := range c.Servers {
		queue, err := srv.Client().ZRange(ctx, layout.TriggersKey(middleware.DefaultPrefix), 0, -1).Result()
		require.NoError(t, err)
		require.Len(t, queue, 1, "node %d: %v", i, queue)
		assert.True(t, strings.HasSuffix(queue[0], " kept admin"), "node %d: %v", i, queue)
	}
	h, err := ctl.History(ctx, "gone", 10)
	require.NoError(t, err)
	assert.Empty(t, h)

	var before uint64
	for _, e := range events {
		if e.Job == "gone" {
			before = max(before, e.Token)
		}
	}
	s2 := newScheduler(t, c.client(t, false), scheduler.WithReplica("r1"), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, s2.Add(job.Job{Name: "gone", Spec: "@every 1s", Options: job.Options{LockTTL: 2 * time.Second},
		Handler: led.handler(func(context.Context) error { return nil })}))
	require.NoError(t, s2.Start())
	again := led.waitEvent(t, "a run of gone added again", func(e event) bool { return e.Job == "gone" && e.Replica == "r1" })
	assert.Greater(t, again.Token, before, "a new counter starts at the node's time, above the old tokens")

	err = ctl.Forget(ctx, "")
	require.ErrorContains(t, err, "job name is empty")
}

// Forget refuses while a run of the job holds its lock, and deletes nothing then.
func TestForgetRefusesWhileTheJobRuns(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	started, release := make(chan struct{}, 1), make(chan struct{})
	s := newScheduler(t, c.client(t, false), scheduler.WithReplica("r0"), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, s.Add(job.Job{Name: "busy", Spec: "@every 1s", Options: job.Options{LockTTL: 2 * time.Second},
		Handler: led.handler(func(ctx context.Context) error {
			select {
			case started <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})}))
	require.NoError(t, s.Start())
	ctx := ctxT(t)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the job never started")
	}
	ctl, err := scheduler.NewControl(c.client(t, false))
	require.NoError(t, err)
	before := c.keysOf(t, "{cronlock:busy}:*")
	err = ctl.Forget(ctx, "busy")
	require.ErrorIs(t, err, scheduler.ErrJobRunning)
	assert.ErrorContains(t, err, "wait for the run to end")
	assert.Equal(t, before, c.keysOf(t, "{cronlock:busy}:*"), "a refusal deletes nothing")

	require.NoError(t, s.Remove("busy"))
	close(release)
	led.waitEvent(t, "the run's end", func(e event) bool { return e.Job == "busy" })
	require.NoError(t, s.Stop(ctx))
	// The release returns at a quorum; the last node may take a moment longer.
	require.Eventually(t, func() bool {
		err = ctl.Forget(ctx, "busy")
		return !errors.Is(err, scheduler.ErrJobRunning)
	}, waitLimit, 20*time.Millisecond, "Forget once the run ended")
	require.NoError(t, err)
	assert.True(t, slices.EqualFunc(c.keysOf(t, "{cronlock:busy}:*"), make([][]string, 3),
		func(a, b []string) bool { return len(a) == len(b) }))
}
