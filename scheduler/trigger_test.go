package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/scheduler"
)

// manual starts n replicas with job "manual", which never ticks in a test (so only manual runs run
// in a test) and takes a millisecond.
func manual(t *testing.T, c *cluster, led *ledger, n int, o job.Options) []*scheduler.Scheduler {
	t.Helper()
	var out []*scheduler.Scheduler
	for i := range n {
		s := newScheduler(t, c.client(t, false), scheduler.WithReplica(fmt.Sprintf("r%d", i)), scheduler.WithMiddleware(led.observe()))
		require.NoError(t, s.Add(job.Job{Name: "manual", Spec: onlyManual, Options: o,
			Handler: led.handler(func(ctx context.Context) error { return sleepCtx(ctx, time.Millisecond) })}))
		require.NoError(t, s.Start())
		out = append(out, s)
	}
	return out
}

// 100 manual runs asked at once from three replicas run 100 times: each once, on one replica.
func TestTriggersRunExactlyOnce(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	rs := manual(t, c, led, 3, job.Options{Overlap: job.Allow, LockTTL: 5 * time.Second})
	ctx := ctxT(t)
	const n = 100
	ids := make(chan string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			id, err := rs[i%3].Control().Trigger(ctx, "manual")
			assert.NoError(t, err)
			ids <- id
		})
	}
	close(start)
	wg.Wait()
	close(ids)
	asked := map[string]bool{}
	for id := range ids {
		asked[id] = true
	}
	require.Len(t, asked, n, "ids are unique")

	// Every request ran and left the queue on every node; then no run can start again.
	led.wait(t, "every manual run", func() bool {
		ran := map[string]bool{}
		for _, e := range led.events {
			ran[e.Trigger] = true
		}
		return len(ran) == n
	})
	require.Eventually(t, func() bool { return c.exists(t, layout.TriggersKey("cronlock")) == 0 }, waitLimit, 10*time.Millisecond)
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range rs {
		require.NoError(t, s.Stop(stop))
	}
	outcomes, events := led.snapshot()
	runs := map[string]int{}
	for _, e := range events {
		assert.True(t, asked[e.Trigger], "run %v is of a trigger asked for", e)
		runs[e.Trigger]++
	}
	for id, k := range runs {
		assert.Equal(t, 1, k, "trigger %s ran %d times", id, k)
	}
	counts := map[string]int{}
	for _, o := range outcomes {
		counts[o.Outcome]++
	}
	assert.Equal(t, n, counts[outcome.Ran], "outcomes %v", counts)
	t.Logf("outcomes: %v", counts)
}

// A manual run asked of a replica that is not running is started by a running one within a
// second, while the job is paused, and is not retried after it failed.
func TestTriggerRunsElsewhereWhilePaused(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	asker := newScheduler(t, c.client(t, false), scheduler.WithReplica("asker"))
	h := job.Job{Name: "manual", Spec: onlyManual, Options: job.Options{Retries: 3}, Handler: led.handler(func(context.Context) error {
		return fmt.Errorf("boom")
	})}
	require.NoError(t, asker.Add(h))
	runner := newScheduler(t, c.client(t, false), scheduler.WithReplica("runner"), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, runner.Add(h))
	require.NoError(t, runner.Start())
	ctx := ctxT(t)
	require.NoError(t, asker.Control().Pause(ctx, "manual", "paused, but an operator asks"))

	asked := time.Now()
	id, err := asker.Control().Trigger(ctx, "manual")
	require.NoError(t, err)
	ev := led.waitEvent(t, "the manual run", func(e event) bool { return e.Trigger == id })
	assert.Equal(t, "runner", ev.Replica)
	assert.Less(t, ev.Start.Sub(asked), time.Second, "started within a second")
	o := led.waitOutcome(t, "its outcome", func(o tickOutcome) bool { return o.Outcome != "" })
	assert.Equal(t, outcome.Failed, o.Outcome)
	require.Eventually(t, func() bool { return c.exists(t, layout.TriggersKey("cronlock")) == 0 }, waitLimit, 10*time.Millisecond)
	assert.True(t, c.doneOnQuorum(t, layout.TriggerKey("cronlock", "manual", id)), "a failed manual run is kept as done")
	require.NoError(t, runner.Stop(ctx))
	_, events := led.snapshot()
	assert.Len(t, events, 1, "run once, not retried")
}

// A traced manual run is a cronlock.trigger span, and its history record has the span's trace.
func TestTriggerIsTracedAndRecorded(t *testing.T) {
	c := newCluster(t, 3, false)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	s := newScheduler(t, c.client(t, false), scheduler.WithMiddleware(middleware.Trace(middleware.WithTracerProvider(tp))))
	require.NoError(t, s.Add(job.Job{Name: "traced", Spec: onlyManual, Handler: func(context.Context) error { return nil }}))
	require.NoError(t, s.Start())
	ctx := ctxT(t)
	id, err := s.Control().Trigger(ctx, "traced")
	require.NoError(t, err)
	var h []scheduler.Record
	var root sdktrace.ReadOnlySpan
	// The attempt's record is written as its lock is released, before the span ends.
	require.Eventually(t, func() bool {
		for _, sp := range spans.Ended() {
			if sp.Name() == "cronlock.trigger" {
				root = sp
			}
		}
		h, err = s.Control().History(ctx, "traced", 1)
		return err == nil && len(h) == 1 && root != nil
	}, waitLimit, 10*time.Millisecond, "the run's record and its cronlock.trigger span")
	assert.Contains(t, root.Attributes(), attribute.String("cronlock.trigger", id))
	assert.Equal(t, root.SpanContext().TraceID().String(), h[0].TraceID)
	assert.Equal(t, id, h[0].Trigger)
}

// With Overlap Forbid, a manual run asked while a run of the job is running waits for it
// (skipped_overlap, still queued), then runs.
func TestTriggerWaitsForTheRunningRun(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	s := newScheduler(t, c.client(t, false), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, s.Add(job.Job{Name: "slow", Spec: onlyManual, Options: job.Options{LockTTL: 5 * time.Second},
		Handler: led.handler(func(context.Context) error {
			if calls.Add(1) == 1 { // the first run holds the job's run key until released
				close(started)
				<-release
			}
			return nil
		})}))
	require.NoError(t, s.Start())
	ctx := ctxT(t)
	first, err := s.Control().Trigger(ctx, "slow")
	require.NoError(t, err)
	<-started
	second, err := s.Control().Trigger(ctx, "slow")
	require.NoError(t, err)
	led.waitOutcome(t, "the second refused while the first runs", func(o tickOutcome) bool { return o.Outcome == outcome.SkippedOverlap })
	close(release)
	led.waitEvent(t, "the second run", func(e event) bool { return e.Trigger == second })
	_, events := led.snapshot()
	require.Len(t, events, 2)
	assert.Equal(t, first, events[0].Trigger)
}

// A manual run asked elsewhere is announced by the nodes: a replica that would not look at the
// queue for an hour starts it at once.
func TestTriggerIsAnnounced(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	h := job.Job{Name: "hinted", Spec: onlyManual, Handler: led.handler(func(context.Context) error { return nil })}
	asker := newScheduler(t, c.client(t, false), scheduler.WithReplica("asker"))
	require.NoError(t, asker.Add(h))
	runner := newScheduler(t, c.client(t, false), scheduler.WithReplica("runner"), schedseam.WithTriggerPoll(time.Hour).(scheduler.Option))
	require.NoError(t, runner.Add(h))
	require.NoError(t, runner.Start())
	ctx := ctxT(t)
	// The runner's first look at the queue (at start) and its subscription come first.
	require.Eventually(t, func() bool {
		n, err := c.Servers[0].Client().PubSubNumSub(ctx, layout.TriggersKey("cronlock")+":asked").Result()
		return err == nil && n[layout.TriggersKey("cronlock")+":asked"] == 1
	}, waitLimit, 10*time.Millisecond)
	id, err := asker.Control().Trigger(ctx, "hinted")
	require.NoError(t, err)
	ev := led.waitEvent(t, "the announced run", func(e event) bool { return e.Trigger == id })
	assert.Equal(t, "runner", ev.Replica)
}

// onlyManual is the spec of jobs whose tests want manual runs only: midnight on 29 February,
// which no test run reaches (an hourly spec did, once, at the top of an hour).
const onlyManual = "0 0 0 29 2 *"
