package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/internal/tickmath"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/scheduler"
)

// startTimes records, per job, the scheduler clock's time when the job's handler started.
type startTimes struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (s *startTimes) work(clock middleware.Clock) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		r, _ := job.RunFrom(ctx)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.at[r.Job] = append(s.at[r.Job], clock.Now())
		return nil
	}
}

// Three replicas on one (fake) clock, 50 jobs on the same spec with Jitter 10s: every replica
// fires each job's tick at the same delayed start, tick + JitterDelay, which is where its
// handler starts; the delays spread over the 10 s (a hash of 50 names cannot put them all
// in a few one-second buckets unless broken); each tick runs once, and Run.Tick stays the
// scheduled instant, the tick's lock and done marker with it.
func TestJitterSpreadsTicksTheSameOnEveryReplica(t *testing.T) {
	const (
		jobs   = 50
		jitter = 10 * time.Second
	)
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	starts := &startTimes{at: map[string][]time.Time{}}
	tick := time.Date(2025, 1, 1, 0, 0, 40, 0, time.UTC) // the first tick of */20 after t0
	delays := map[string]time.Duration{}
	for r := range 3 {
		s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithReplica(fmt.Sprintf("r%d", r)),
			scheduler.WithMiddleware(led.observe()))
		for i := range jobs {
			name := fmt.Sprintf("spread-%02d", i)
			delays[name] = tickmath.JitterDelay(name, tick, jitter)
			require.NoError(t, s.Add(job.Job{Name: name, Spec: "*/20 * * * * *", Options: job.Options{Jitter: jitter},
				Handler: led.handler(starts.work(clock))}))
		}
		require.NoError(t, s.Start())
	}
	due := func(now time.Time) int {
		n := 0
		for _, d := range delays {
			if !tick.Add(d).After(now) {
				n++
			}
		}
		return n
	}
	for steps := 0; due(clock.Now()) < jobs; steps++ {
		require.Less(t, steps, jobs, "every advance starts at least one job")
		now := advance(t, clock, 3) // the three loops wait for the same start
		require.True(t, now.Before(tick.Add(jitter)), "no tick starts %v or more after its instant: %v", jitter, now)
		n := due(now)
		led.wait(t, fmt.Sprintf("the outcomes of the %d jobs due at %s on every replica", n, now.Format("15:04:05.000")),
			func() bool { return len(led.outcomes) >= 3*n })
		outcomes, _ := led.snapshot()
		require.Len(t, outcomes, 3*n, "no job fired before its start: %v", outcomes)
	}

	outcomes, events := led.snapshot()
	buckets := map[int64]bool{}
	for _, o := range outcomes {
		want := tick.Add(tickmath.JitterDelay(o.Job, o.Tick, jitter))
		assert.True(t, o.Tick.Equal(tick), "Run.Tick is the scheduled instant: %v", o)
		assert.True(t, o.Planned.Equal(want), "%s on %s: planned start %v, JitterDelay says %v", o.Job, o.Replica, o.Planned, want)
		assert.Contains(t, []string{outcome.Ran, outcome.SkippedHeld, outcome.SkippedDone}, o.Outcome, "%v", o)
		buckets[int64(o.Planned.Sub(tick)/time.Second)] = true
	}
	assert.GreaterOrEqual(t, len(buckets), 7, "50 delays in [0, 10s) fill most one-second buckets: %v", buckets)
	t.Logf("one-second buckets used: %d of 10", len(buckets))
	ran := map[string]int{}
	for _, e := range events {
		ran[e.Job]++
		assert.True(t, e.Planned.Equal(tick.Add(delays[e.Job])), "the run's PlannedStart: %v", e)
		assert.True(t, c.doneOnQuorum(t, layout.TickKey("cronlock", e.Job, tick)), "the done marker is the instant's: %v", e)
	}
	starts.mu.Lock()
	defer starts.mu.Unlock()
	for name, d := range delays {
		assert.Equal(t, 1, ran[name], "%s: one run of the tick", name)
		if assert.Len(t, starts.at[name], 1, name) {
			assert.True(t, starts.at[name][0].Equal(tick.Add(d)), "%s started at %v, its planned start is %v", name, starts.at[name][0], tick.Add(d))
		}
	}
}

// A tick waiting for its jitter delay has not started: removing a job during its delay drops
// the tick; replacing it (Remove, then Add of the same name) keeps the tick, which the new job
// runs at its planned start; a scheduler started during a tick's delay runs that tick at its
// start, once, even with a CatchUp window that covers it. Stop during the delays returns at
// once, without waiting them out (the clock does not move), and nothing starts after it.
func TestJitterDelayBeforeTheStart(t *testing.T) {
	const jitter = 30 * time.Second
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	tick := time.Date(2025, 1, 1, 0, 1, 0, 0, time.UTC)
	next := tick.Add(time.Minute)
	// Three names whose delays of tick are in 5-12s, 14-20s and 22-28s, and whose delays of
	// the next tick are not zero: the test stands between instants and starts.
	delay := func(name string) time.Duration { return tickmath.JitterDelay(name, tick, jitter) }
	names := make([]string, 3)
	for i := 0; (names[0] == "" || names[1] == "" || names[2] == "") && i < 10000; i++ {
		name := fmt.Sprintf("delayed-%d", i)
		d := delay(name)
		for k, r := range [][2]time.Duration{{5 * time.Second, 12 * time.Second}, {14 * time.Second, 20 * time.Second}, {22 * time.Second, 28 * time.Second}} {
			if names[k] == "" && d > r[0] && d < r[1] && tickmath.JitterDelay(name, next, jitter) > 0 {
				names[k] = name
			}
		}
	}
	require.NotContains(t, names, "", "names with delays in each range")
	replaced, removed, late := names[0], names[1], names[2]
	mk := func(name string, catchUp time.Duration, h job.Handler) job.Job {
		return job.Job{Name: name, Spec: "@every 1m", Options: job.Options{Jitter: jitter, CatchUp: catchUp}, Handler: h}
	}
	a := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithReplica("a"), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, a.Add(mk(removed, 0, led.handler(nop))))
	require.NoError(t, a.Add(mk(replaced, 0, led.handler(func(context.Context) error { return fmt.Errorf("the replaced job ran") }))))
	require.NoError(t, a.Start())

	clock.Set(tick.Add(time.Second)) // past the instant, before every start
	require.NoError(t, clock.BlockUntil(ctxT(t), 1))
	require.NoError(t, a.Remove(removed))
	require.NoError(t, a.Remove(replaced))
	require.NoError(t, a.Add(mk(replaced, 0, led.handler(nop))))
	n, ok := entry(a, replaced)
	require.True(t, ok)
	assert.True(t, n.Equal(tick), "the replaced job's next tick is the one in its delay: %v", n)
	at := tick.Add(delay(replaced))
	advanceTo(t, clock, at)
	o := led.waitOutcome(t, "the replaced job's tick", func(o tickOutcome) bool { return o.Job == replaced })
	assert.Equal(t, outcome.Ran, o.Outcome, "%v", o)
	assert.True(t, o.Tick.Equal(tick) && o.Planned.Equal(at), "%v planned %v", o, o.Planned)
	assert.True(t, clock.Now().Equal(at), "it started at its planned start: %v", clock.Now())

	// A second replica starts during the third job's delay, with a CatchUp window over the
	// tick: it runs the tick at its start, and only then (not also as a caught-up tick).
	b := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithReplica("b"), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, b.Add(mk(late, time.Minute, led.handler(nop))))
	require.NoError(t, b.Start())
	lateAt := tick.Add(delay(late))
	require.True(t, clock.Now().Before(lateAt), "the test stands in the delay of %s", late)
	advanceTo(t, clock, lateAt)
	o = led.waitOutcome(t, "the late replica's tick", func(o tickOutcome) bool { return o.Job == late })
	assert.Equal(t, outcome.Ran, o.Outcome, "%v", o)
	assert.True(t, o.Tick.Equal(tick) && o.Planned.Equal(lateAt), "%v planned %v", o, o.Planned)

	// At the next instant, both jobs wait for their delays; Stop does not.
	clock.Set(next)
	require.NoError(t, a.Stop(ctxT(t)))
	require.NoError(t, b.Stop(ctxT(t)))
	clock.Set(next.Add(jitter))
	outcomes, events := led.snapshot()
	assert.Len(t, outcomes, 2, "one outcome of each tick that started: %v", outcomes)
	assert.Len(t, events, 2, "the removed job and the replaced one's old handler never ran: %v", events)
	for _, e := range events {
		assert.NotEqual(t, removed, e.Job)
		assert.NoError(t, e.Err)
	}
}

// entry returns the next tick of the job named name in s.Entries.
func entry(s *scheduler.Scheduler, name string) (time.Time, bool) {
	for _, e := range s.Entries() {
		if e.Name == name {
			return e.Next, true
		}
	}
	return time.Time{}, false
}

// A Jitter is refused when it is not shorter than the gap between ticks, naming
// Options.Jitter; manual runs are not delayed (their planned start is when they were asked
// for), and Entries shows the jitter and the resolved schedule.
func TestJitterBoundsAndManualRuns(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()),
		schedseam.WithTriggerPoll(10*time.Millisecond).(scheduler.Option))
	for _, tc := range []struct {
		spec   string
		jitter time.Duration
		gap    string
	}{
		{"*/20 * * * * *", 20 * time.Second, "20s"},
		{"0,10 0 * * *", 10 * time.Minute, "10m0s"}, // the shortest of its gaps
		{"@every 5s", time.Minute, "5s"},
	} {
		err := s.Add(job.Job{Name: "too-long", Spec: tc.spec, Options: job.Options{Jitter: tc.jitter}, Handler: nop})
		require.ErrorIs(t, err, job.ErrInvalid, tc.spec)
		assert.Contains(t, err.Error(), "Options.Jitter", tc.spec)
		assert.Contains(t, err.Error(), fmt.Sprintf("is not shorter than the %s between ticks", tc.gap), tc.spec)
	}
	assert.Empty(t, s.Entries(), "nothing half-registered")

	require.NoError(t, s.Add(job.Job{Name: "hashed", Spec: "H H * * *", Options: job.Options{Jitter: time.Hour}, Handler: led.handler(nop)}))
	es := s.Entries()
	require.Len(t, es, 1)
	resolved, err := schedseam.ResolveSpec("H H * * *", "hashed")
	require.NoError(t, err)
	assert.Equal(t, scheduler.Entry{Name: "hashed", Spec: "H H * * *", Schedule: resolved, Jitter: time.Hour, Next: es[0].Next}, es[0])
	require.NoError(t, s.Start())
	id, err := s.Control().Trigger(ctxT(t), "hashed")
	require.NoError(t, err)
	e := led.waitEvent(t, "the manual run", func(e event) bool { return e.Trigger == id })
	assert.True(t, e.Planned.Equal(e.Tick), "a manual run starts when asked: planned %v, asked %v", e.Planned, e.Tick)
}

// A delayed tick's span has its instant as cronlock.tick and its planned start as
// cronlock.planned_start; its history record has both.
func TestJitteredTickIsTracedAndRecorded(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithMiddleware(middleware.Trace(middleware.WithTracerProvider(tp))))
	require.NoError(t, s.Add(job.Job{Name: "traced", Spec: "@every 1m", Options: job.Options{Jitter: 30 * time.Second}, Handler: nop}))
	require.NoError(t, s.Start())
	tick := time.Date(2025, 1, 1, 0, 1, 0, 0, time.UTC)
	at := tick.Add(tickmath.JitterDelay("traced", tick, 30*time.Second))
	require.Greater(t, at, tick, "the tick is delayed")
	require.True(t, advance(t, clock, 1).Equal(at), "the loop waits for the delayed start")
	ctx := ctxT(t)
	var h []scheduler.Record
	require.Eventually(t, func() bool {
		var err error
		h, err = s.Control().History(ctx, "traced", 1)
		return err == nil && len(h) == 1
	}, waitLimit, 10*time.Millisecond)
	assert.True(t, h[0].Tick.Equal(tick), "%v", h[0].Tick)
	assert.True(t, h[0].PlannedStart.Equal(at), "the record's planned start %v, want %v", h[0].PlannedStart, at)
	// The attempt's record is written as its lock is released, before the tick's span ends (and
	// after its child spans did: seen beside a CPU hog, no cronlock.tick span yet).
	var root sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, sp := range spans.Ended() {
			if sp.Name() == "cronlock.tick" {
				root = sp
			}
		}
		return root != nil
	}, waitLimit, time.Millisecond, "a cronlock.tick span")
	assert.Contains(t, root.Attributes(), attribute.Int64("cronlock.tick", tick.UnixMilli()))
	assert.Contains(t, root.Attributes(), attribute.Int64("cronlock.planned_start", at.UnixMilli()))
}
