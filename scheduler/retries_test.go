package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/scheduler"
)

// Retries bounds a tick's runs across the cluster: three replicas take turns at an
// always-failing tick (each fires it, or retries it, on its own clock), and with Retries 2 it
// runs 3 times in all, numbered 1, 2, 3 across the replicas, one at a time. The attempts past
// the bound are not run, and the tick ends kept as done.
func TestRetriesBoundATickAcrossReplicas(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	names := []string{"r1", "r2", "r3"}
	clocks := make([]*clocktest.Fake, len(names))
	for i, name := range names {
		clocks[i] = clocktest.NewFake(t0)
		s := newScheduler(t, c.client(t, false), scheduler.WithClock(clocks[i]), scheduler.WithReplica(name), scheduler.WithMiddleware(led.observe()))
		require.NoError(t, s.Add(job.Job{Name: "broken", Spec: "@every 1m",
			Options: job.Options{Retries: 2, RetryBackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Second) }},
			Handler: led.handler(func(context.Context) error { return errors.New("always") })}))
		require.NoError(t, s.Start())
	}
	runs := func(n int) func() bool { return func() bool { return len(led.events) >= n } }
	// Each replica fires the tick in turn, after the previous one's run failed and released it.
	var tick time.Time
	for i, clock := range clocks {
		tick = advance(t, clock, 1)
		led.wait(t, "the run of "+names[i], runs(i+1))
		// Released: the replica waits to retry, beside its loop's next tick.
		require.NoError(t, clock.BlockUntil(ctxT(t), 2))
	}
	// Then each retries it.
	for i, clock := range clocks {
		advance(t, clock, 2) // the loop's next tick, and the retry's backoff
		led.wait(t, "the outcome of "+names[i], func() bool { return len(led.outcomes) >= i+1 })
	}
	outcomes, events := led.snapshot()
	require.Len(t, events, 3, "Retries 2: 3 runs of the tick in all")
	for i, e := range events {
		assert.Equal(t, names[i], e.Replica)
		assert.True(t, e.Tick.Equal(tick))
		assert.Equal(t, i+1, e.Attempt, "attempts are numbered across the cluster")
		if i > 0 {
			assert.False(t, e.Start.Before(events[i-1].End), "never two runs at once")
		}
	}
	require.Len(t, outcomes, 3)
	assert.ErrorIs(t, outcomes[0].Err, middleware.ErrNoAttemptsLeft)
	assert.Equal(t, outcome.Failed, outcomes[0].Outcome)
	for _, o := range outcomes[1:] {
		assert.Equal(t, outcome.SkippedDone, o.Outcome, "%v", o)
	}
	assert.True(t, c.doneOnQuorum(t, layout.TickKey("cronlock", "broken", tick)))
}
