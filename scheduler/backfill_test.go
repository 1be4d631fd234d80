package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/scheduler"
)

// backfillReplicas starts n schedulers with job "bf" on @every 1m (Forbid), whose runs the
// ledger records; each run works a little, so that overlapping runs would show.
func backfillReplicas(t *testing.T, c *cluster, led *ledger, n int) []*scheduler.Scheduler {
	t.Helper()
	var out []*scheduler.Scheduler
	for i := range n {
		s := newScheduler(t, c.client(t, false), scheduler.WithReplica(fmt.Sprintf("r%d", i)),
			scheduler.WithMiddleware(led.observe()), scheduler.WithTickRetention(5*time.Minute))
		require.NoError(t, s.Add(job.Job{Name: "bf", Spec: "@every 1m", Options: job.Options{LockTTL: 2 * time.Second},
			Handler: led.handler(func(ctx context.Context) error {
				if r, _ := job.RunFrom(ctx); !r.Backfill {
					return nil // a scheduled tick that came during the test
				}
				return sleepCtx(ctx, 20*time.Millisecond)
			})}))
		require.NoError(t, s.Start())
		out = append(out, s)
	}
	return out
}

// Three replicas backfill the same 20 ticks at once, 5 of which a first backfill ran: every
// tick runs once in all, the 5 are not run again, no two runs overlap, and the history marks
// the runs as backfilled; once the done markers are gone, the history still keeps the ticks
// from running again.
func TestBackfillRunsEachTickOnceAcrossReplicas(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	rs := backfillReplicas(t, c, led, 3)
	ctx := ctxT(t)
	to := time.Now().Truncate(time.Minute).Add(-time.Minute)
	from := to.Add(-19 * time.Minute)

	first, err := rs[0].Backfill(ctx, "bf", from.Add(5*time.Minute), from.Add(9*time.Minute), scheduler.BackfillOptions{})
	require.NoError(t, err)
	assert.Equal(t, scheduler.BackfillSummary{Ticks: 5, Ran: 5}, first)

	sums := make([]scheduler.BackfillSummary, len(rs))
	errs := make([]error, len(rs))
	progress := make([]int, len(rs))
	var wg sync.WaitGroup
	for i, s := range rs {
		wg.Go(func() {
			sums[i], errs[i] = s.Backfill(ctx, "bf", from, to, scheduler.BackfillOptions{
				Progress: func(time.Time, string, scheduler.BackfillSummary) { progress[i]++ }})
		})
	}
	wg.Wait()
	var total scheduler.BackfillSummary
	for i := range rs {
		require.NoError(t, errs[i], "r%d", i)
		assert.Equal(t, 20, sums[i].Ticks)
		assert.Equal(t, 20, progress[i], "r%d: a progress call per tick", i)
		total.Ran += sums[i].Ran
		total.Done += sums[i].Done
	}
	assert.Equal(t, 15, total.Ran, "the 15 ticks not run before, once each: %+v", sums)
	assert.GreaterOrEqual(t, total.Done, 5, "every replica found the first five done: %+v", sums)

	_, events := led.snapshot()
	runs := map[time.Time]int{}
	var backfilled []event
	for _, e := range events {
		if e.Job == "bf" && !e.Tick.Before(from) && !e.Tick.After(to) {
			runs[e.Tick]++
			backfilled = append(backfilled, e)
		}
	}
	for tick := from; !tick.After(to); tick = tick.Add(time.Minute) {
		assert.Equal(t, 1, runs[tick], "tick %s", tick.Format(time.TimeOnly))
	}
	slices.SortFunc(backfilled, func(a, b event) int { return a.Start.Compare(b.Start) })
	for i := 1; i < len(backfilled); i++ {
		assert.False(t, backfilled[i].Start.Before(backfilled[i-1].End), "runs overlap: %v and %v", backfilled[i-1], backfilled[i])
	}

	h, err := rs[0].Control().History(ctx, "bf", 100)
	require.NoError(t, err)
	n := 0
	for _, r := range h {
		if r.Backfill && r.Outcome == outcome.Ran {
			n++
		}
	}
	assert.Equal(t, 20, n, "the history marks every backfilled run")

	for _, srv := range c.Servers { // the done markers and attempt counts expire; the history stays
		for tick := from; !tick.After(to); tick = tick.Add(time.Minute) {
			require.NoError(t, srv.Client().Del(ctx, layout.TickKey("cronlock", "bf", tick), layout.AttemptsKey("cronlock", "bf", tick)).Err())
		}
	}
	again, err := rs[1].Backfill(ctx, "bf", from, to, scheduler.BackfillOptions{})
	require.NoError(t, err)
	assert.Equal(t, scheduler.BackfillSummary{Ticks: 20, Done: 20}, again, "the history shows them run")
}

// Bad ranges are refused before anything runs, a paused job stops the backfill, and ending
// the context stops it after the tick under way.
func TestBackfillRefusesAndStops(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	s := backfillReplicas(t, c, led, 1)[0]
	ctx := ctxT(t)
	to := time.Now().Truncate(time.Minute).Add(-time.Minute)
	for _, tc := range []struct {
		name, job string
		from, to  time.Time
		opts      scheduler.BackfillOptions
		want      string
	}{
		{"reversed", "bf", to, to.Add(-time.Hour), scheduler.BackfillOptions{}, "is after to"},
		{"future", "bf", to, time.Now().Add(time.Hour), scheduler.BackfillOptions{}, "is in the future"},
		{"too many", "bf", to.Add(-1001 * time.Minute), to, scheduler.BackfillOptions{}, "more than 1000 ticks"},
		{"over max", "bf", to.Add(-3 * time.Minute), to, scheduler.BackfillOptions{Max: 3}, "more than 3 ticks"},
		{"negative max", "bf", to, to, scheduler.BackfillOptions{Max: -1}, "give a positive bound"},
		{"unknown", "nope", to, to, scheduler.BackfillOptions{}, "no such job"},
	} {
		sum, err := s.Backfill(ctx, tc.job, tc.from, tc.to, tc.opts)
		assert.ErrorContains(t, err, tc.want, tc.name)
		assert.Zero(t, sum.Ran, tc.name)
	}
	_, events := led.snapshot()
	assert.Empty(t, events, "nothing ran")

	notStarted := newScheduler(t, c.client(t, false))
	require.NoError(t, notStarted.Add(job.Job{Name: "bf", Spec: "@every 1m", Handler: func(context.Context) error { return nil }}))
	_, err := notStarted.Backfill(ctx, "bf", to, to, scheduler.BackfillOptions{})
	assert.ErrorContains(t, err, "not started")

	require.NoError(t, s.Control().Pause(ctx, "bf", "maintenance"))
	_, err = s.Backfill(ctx, "bf", to.Add(-time.Minute), to, scheduler.BackfillOptions{})
	assert.ErrorContains(t, err, "the job is paused")
	require.NoError(t, s.Control().Resume(ctx, "bf"))

	stopCtx, stop := context.WithCancel(ctx)
	sum, err := s.Backfill(stopCtx, "bf", to.Add(-9*time.Minute), to, scheduler.BackfillOptions{
		Progress: func(time.Time, string, scheduler.BackfillSummary) { stop() }})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, scheduler.BackfillSummary{Ticks: 10, Ran: 1}, sum, "stopped after the tick under way")

	require.NoError(t, s.Stop(ctx))
	_, err = s.Backfill(ctx, "bf", to, to, scheduler.BackfillOptions{})
	assert.ErrorIs(t, err, scheduler.ErrStopped)
}

// A job paused across a stretch of ticks, then resumed: a backfill over the range leaves the
// ticks skipped while it was paused alone and counts them; with IncludePaused it runs each of
// them, once.
func TestBackfillLeavesTicksSkippedWhilePaused(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	var mu sync.Mutex
	backfilled := map[time.Time]int{}
	s := newScheduler(t, c.client(t, false), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, s.Add(job.Job{Name: "p", Spec: "@every 1s", Options: job.Options{LockTTL: 2 * time.Second},
		Handler: led.handler(func(ctx context.Context) error {
			if r, _ := job.RunFrom(ctx); r.Backfill {
				mu.Lock()
				backfilled[r.Tick]++
				mu.Unlock()
			}
			return nil
		})}))
	ctx := ctxT(t)
	from := time.Now().Truncate(time.Second)
	require.NoError(t, s.Start())
	led.waitOutcome(t, "a run", func(o tickOutcome) bool { return o.Outcome == outcome.Ran })
	require.NoError(t, s.Control().Pause(ctx, "p", "maintenance"))
	pausedAt := time.Now()
	led.waitOutcome(t, "the third tick skipped while paused", func(o tickOutcome) bool {
		return o.Outcome == outcome.SkippedPaused && o.Tick.After(pausedAt.Add(2*time.Second))
	})
	require.NoError(t, s.Control().Resume(ctx, "p"))
	resumedAt := time.Now()
	led.waitOutcome(t, "a run after the pause", func(o tickOutcome) bool { return o.Outcome == outcome.Ran && o.Tick.After(resumedAt) })
	to := time.Now().Truncate(time.Second).Add(-time.Second)

	h, err := s.Control().History(ctx, "p", 100)
	require.NoError(t, err)
	var paused []time.Time
	for _, r := range h {
		if r.Outcome == outcome.SkippedPaused && !r.Tick.Before(from) && !r.Tick.After(to) {
			paused = append(paused, r.Tick)
		}
	}
	require.GreaterOrEqual(t, len(paused), 3, "the history shows the paused ticks: %v", h)

	sum, err := s.Backfill(ctx, "p", from, to, scheduler.BackfillOptions{})
	require.NoError(t, err)
	assert.Equal(t, len(paused), sum.Paused, "%+v", sum)
	assert.Equal(t, sum.Ticks, sum.Ran+sum.Done+sum.Paused, "%+v", sum)
	mu.Lock()
	for _, tick := range paused {
		assert.Zero(t, backfilled[tick], "tick %s skipped while paused was backfilled", tick.Format(time.TimeOnly))
	}
	mu.Unlock()

	sum, err = s.Backfill(ctx, "p", from, to, scheduler.BackfillOptions{IncludePaused: true})
	require.NoError(t, err)
	assert.Equal(t, scheduler.BackfillSummary{Ticks: sum.Ticks, Ran: len(paused), Done: sum.Ticks - len(paused)}, sum)
	again, err := s.Backfill(ctx, "p", from, to, scheduler.BackfillOptions{})
	require.NoError(t, err)
	assert.Equal(t, scheduler.BackfillSummary{Ticks: sum.Ticks, Done: sum.Ticks}, again, "a paused tick run since is done")
	mu.Lock()
	defer mu.Unlock()
	for _, tick := range paused {
		assert.Equal(t, 1, backfilled[tick], "tick %s skipped while paused, with IncludePaused", tick.Format(time.TimeOnly))
	}
}
