package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/scheduler"
)

const controlPeriod = 100 * time.Millisecond

// replicas starts n schedulers, each with a redlock client of its own over c, running job
// "ctl" every controlPeriod into led.
func replicas(t *testing.T, c *cluster, led *ledger, n int, opts ...scheduler.Option) []*scheduler.Scheduler {
	t.Helper()
	var out []*scheduler.Scheduler
	for i := range n {
		s := newScheduler(t, c.client(t, false), append([]scheduler.Option{scheduler.WithReplica(fmt.Sprintf("r%d", i)),
			scheduler.WithMiddleware(led.observe())}, opts...)...)
		require.NoError(t, s.Add(job.Job{Name: "ctl", Spec: fmt.Sprintf("@every %v", controlPeriod),
			Options: job.Options{LockTTL: 2 * time.Second}, Handler: led.handler(func(context.Context) error { return nil })}))
		out = append(out, s)
	}
	for _, s := range out {
		require.NoError(t, s.Start())
	}
	return out
}

// checkPaused waits until every replica skipped two ticks after paused as skipped_paused with
// reason, and asserts that no tick after paused ran anywhere (until resumed, if not zero).
func checkPaused(t *testing.T, led *ledger, n int, paused time.Time, reason string) {
	t.Helper()
	led.wait(t, "every replica skipping paused ticks", func() bool {
		skips := map[string]int{}
		for _, o := range led.outcomes {
			if o.Tick.After(paused) && o.Outcome == outcome.SkippedPaused {
				skips[o.Replica]++
			}
		}
		for i := range n {
			if skips[fmt.Sprintf("r%d", i)] < 2 {
				return false
			}
		}
		return true
	})
	outcomes, events := led.snapshot()
	for _, e := range events {
		assert.False(t, e.Tick.After(paused), "tick %v ran while paused: %v", e.Tick, e)
	}
	for _, o := range outcomes {
		if o.Outcome == outcome.SkippedPaused {
			assert.ErrorContains(t, o.Err, reason)
		}
	}
}

// Three replicas on three nodes: a pause from one replica stops the job on every replica, also
// once a node is down, and a resume from another lets the next tick run.
func TestPauseStopsEveryReplicaUntilResume(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	rs := replicas(t, c, led, 3)
	ctx := ctxT(t)
	led.waitEvent(t, "a first run", func(event) bool { return true })

	require.NoError(t, rs[0].Control().Pause(ctx, "ctl", "migration 42"))
	paused := time.Now()
	checkPaused(t, led, 3, paused, "migration 42")
	require.NoError(t, c.Servers[2].Kill()) // a minority down: the pause holds
	down := time.Now()
	checkPaused(t, led, 3, down, "migration 42")

	resuming := time.Now()
	require.NoError(t, rs[1].Control().Resume(ctx, "ctl"))
	resumed := time.Now()
	led.waitEvent(t, "a run after resume", func(e event) bool { return e.Tick.After(resumed) })
	_, events := led.snapshot()
	for _, e := range events {
		// A tick due before Resume may run once Resume reached the nodes its acquisition asks.
		assert.False(t, e.Tick.After(paused) && e.Start.Before(resuming), "tick %v ran while paused: %v", e.Tick, e)
	}
}

// With one node of three down before the pause, pause and resume still work: each is written
// to the two nodes that answer.
func TestPauseAndResumeWithOneNodeDown(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	rs := replicas(t, c, led, 3)
	ctx := ctxT(t)
	require.NoError(t, c.Servers[0].Kill())

	require.NoError(t, rs[2].Control().Pause(ctx, "ctl", "node 0 is down"))
	paused := time.Now()
	checkPaused(t, led, 3, paused, "node 0 is down")
	require.NoError(t, rs[0].Control().Resume(ctx, "ctl"))
	resumed := time.Now()
	led.waitEvent(t, "a run after resume", func(e event) bool { return e.Tick.After(resumed) })
}

func TestPauseRefusesBadInput(t *testing.T) {
	c := newCluster(t, 1, false)
	s := newScheduler(t, c.client(t, false))
	ctx := ctxT(t)
	require.ErrorIs(t, s.Control().Pause(ctx, "nope", "x"), scheduler.ErrUnknownJob)
	require.ErrorIs(t, s.Control().Resume(ctx, "nope"), scheduler.ErrUnknownJob)
	require.NoError(t, s.Add(job.Job{Name: "j", Spec: "@hourly", Handler: func(context.Context) error { return nil }}))
	require.ErrorContains(t, s.Control().Pause(ctx, "j", " "), "the reason is empty")
}

// A Scheduler's Control refuses to trigger or read the history or status of a job that the
// scheduler does not have, writing nothing; a NewControl's, which knows no jobs, asks the nodes.
func TestSchedulersControlKnowsItsJobs(t *testing.T) {
	c := newCluster(t, 1, false)
	s := newScheduler(t, c.client(t, false))
	ctx := ctxT(t)
	require.Same(t, s.Control(), s.Control())
	_, err := s.Control().Trigger(ctx, "nope")
	require.ErrorIs(t, err, scheduler.ErrUnknownJob)
	_, err = s.Control().History(ctx, "nope", 1)
	require.ErrorIs(t, err, scheduler.ErrUnknownJob)
	_, err = s.Control().HistoryWithOutput(ctx, "nope", 1)
	require.ErrorIs(t, err, scheduler.ErrUnknownJob)
	_, err = s.Control().Status(ctx, "nope")
	require.ErrorIs(t, err, scheduler.ErrUnknownJob)
	n, err := c.Servers[0].Client().Exists(ctx, layout.TriggersKey("cronlock")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a refused trigger writes nothing")

	ctl, err := scheduler.NewControl(c.client(t, false))
	require.NoError(t, err)
	_, err = ctl.Trigger(ctx, "nope")
	require.NoError(t, err)
	h, err := ctl.History(ctx, "nope", 1)
	require.NoError(t, err)
	assert.Empty(t, h)
	st, err := ctl.Status(ctx, "nope")
	require.NoError(t, err)
	assert.Equal(t, scheduler.Status{Entry: scheduler.Entry{Name: "nope"}}, st, "only what the nodes hold: nothing")
}
