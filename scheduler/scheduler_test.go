package scheduler_test

import (
	"context"
	"errors"
	"sync/atomic"
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
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// t0 is where fake clocks start: 30s before a minute boundary.
var t0 = time.Date(2025, 1, 1, 0, 0, 30, 0, time.UTC)

func nop(context.Context) error { return nil }

// advance waits until at least timers timers are waiting on clock (the scheduler loops, and
// any backoff), then moves the clock to the earliest deadline and returns it.
func advance(t testing.TB, clock *clocktest.Fake, timers int) time.Time {
	t.Helper()
	for {
		require.NoError(t, clock.BlockUntil(ctxT(t), timers))
		// A timer can be replaced between the two calls (a loop woken by a change of its
		// queue stops its timer and makes another): then wait again.
		if d, ok := clock.NextDeadline(); ok {
			clock.Set(d)
			return d
		}
	}
}

// advanceTo moves clock to at through every timer due by then, each fired at its deadline.
// Before each step it waits for a timer due by at: a scheduler makes its timers in its own
// goroutines (a loop woken by Add, a tick's jitter delay), and stepping to whichever timer
// exists at that moment could jump past at before the one the test waits for is made.
func advanceTo(t testing.TB, clock *clocktest.Fake, at time.Time) {
	t.Helper()
	for clock.Now().Before(at) {
		require.NoError(t, clock.BlockUntilDue(ctxT(t), at))
		if d, ok := clock.NextDeadline(); ok && !d.After(at) { // else the timer was stopped in between: wait again
			clock.Set(d)
		}
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	c := newCluster(t, 1, false)
	lc := c.client(t, false)
	for _, tc := range []struct {
		name string
		opts []scheduler.Option
		want string
	}{
		{"nil clock", []scheduler.Option{scheduler.WithClock(nil)}, "WithClock(nil)"},
		{"nil option", []scheduler.Option{scheduler.WithPrefix("p"), nil}, "option 1 is nil"},
		{"empty prefix", []scheduler.Option{scheduler.WithPrefix("")}, `prefix ""`},
		{"brace in prefix", []scheduler.Option{scheduler.WithPrefix("a{b")}, "without braces"},
		{"empty replica", []scheduler.Option{scheduler.WithReplica("")}, "replica name is empty"},
		{"nil logger", []scheduler.Option{scheduler.WithLogger(nil)}, "WithLogger(nil)"},
		{"nil location", []scheduler.Option{scheduler.WithLocation(nil)}, "WithLocation(nil)"},
		{"nil middleware", []scheduler.Option{scheduler.WithMiddleware(nil)}, "middleware 0 is nil"},
		{"negative skew", []scheduler.Option{scheduler.WithMaxClockSkew(-time.Second)}, "max clock skew -1s is negative"},
		{"zero retention", []scheduler.Option{scheduler.WithTickRetention(0)}, "tick retention 0s: must be positive"},
		{"zero lock concurrency", []scheduler.Option{scheduler.WithLockConcurrency(0)}, "lock concurrency 0: must be positive"},
		{"retention within skew", []scheduler.Option{scheduler.WithMaxClockSkew(time.Minute), scheduler.WithTickRetention(time.Minute)},
			"must exceed twice the max clock skew (2m0s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scheduler.New(lc, tc.opts...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := scheduler.New(nil)
	assert.ErrorContains(t, err, "redlock client is nil")
	// A large skew without a retention gets a default retention that leaves room for attempts.
	_, err = scheduler.New(lc, scheduler.WithMaxClockSkew(time.Minute))
	assert.NoError(t, err)
}

func TestAddRefusesBadJobs(t *testing.T) {
	c := newCluster(t, 1, false)
	lc := c.client(t, false, redlock.WithMaxTTL(time.Minute))
	clock := clocktest.NewFake(t0)
	s := newScheduler(t, lc, scheduler.WithClock(clock))
	require.NoError(t, s.Add(job.Job{Name: "existing", Spec: "@hourly", Handler: nop}))
	before := s.Entries()

	ok := job.Job{Name: "j", Spec: "*/5 * * * *", Handler: nop}
	with := func(f func(*job.Job)) job.Job { j := ok; f(&j); return j }
	for _, tc := range []struct {
		name  string
		job   job.Job
		field string
		want  string
	}{
		{"empty name", with(func(j *job.Job) { j.Name = "" }), "Name", "is empty"},
		{"space in name", with(func(j *job.Job) { j.Name = "a b" }), "Name", "without spaces"},
		{"brace in name", with(func(j *job.Job) { j.Name = "a}" }), "Name", "hash tag"},
		{"duplicate name", with(func(j *job.Job) { j.Name = "existing" }), "Name", "already registered"},
		{"nil func", with(func(j *job.Job) { j.Handler = nil }), "Handler", "is nil"},
		{"empty spec", with(func(j *job.Job) { j.Spec = " " }), "Spec", "is empty"},
		{"bad spec", with(func(j *job.Job) { j.Spec = "61 * * * *" }), "Spec", `field 1 (minute) "61"`},
		{"short spec", with(func(j *job.Job) { j.Spec = "* *" }), "Spec", `e.g. "*/5 * * * *"`},
		{"never fires", with(func(j *job.Job) { j.Spec = "0 0 30 2 *" }), "Spec", "never fires"},
		{"negative timeout", with(func(j *job.Job) { j.Timeout = -time.Second }), "Options.Timeout", "negative"},
		{"negative TTL", with(func(j *job.Job) { j.LockTTL = -time.Second }), "Options.LockTTL", "negative"},
		{"TTL above max", with(func(j *job.Job) { j.LockTTL = 2 * time.Minute }), "Options.LockTTL", "above the max TTL"},
		{"TTL too short", with(func(j *job.Job) { j.LockTTL = 3 * time.Millisecond; j.RenewEvery = time.Millisecond }), "Options.LockTTL", "leaves no validity"},
		{"renewal not before TTL", with(func(j *job.Job) { j.LockTTL = time.Second; j.RenewEvery = time.Second }), "Options.RenewEvery", "not shorter than LockTTL"},
		{"renewal too late", with(func(j *job.Job) { j.LockTTL = time.Second; j.RenewEvery = 600 * time.Millisecond }), "Options.RenewEvery", "more than half"},
		{"bad overlap", with(func(j *job.Job) { j.Overlap = 7 }), "Options.Overlap", "unknown"},
		{"negative retries", with(func(j *job.Job) { j.Retries = -1 }), "Options.Retries", "negative"},
		{"negative catch-up", with(func(j *job.Job) { j.CatchUp = -time.Second }), "Options.CatchUp", "negative"},
		{"bad H", with(func(j *job.Job) { j.Spec = "H(50-10) * * * *" }), "Spec", `field 1 (minute) "H(50-10)"`},
		{"negative jitter", with(func(j *job.Job) { j.Jitter = -time.Second }), "Options.Jitter", "negative"},
		{"jitter not within the gap", with(func(j *job.Job) { j.Jitter = 5 * time.Minute }), "Options.Jitter", "not shorter than the 5m0s between ticks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Add(tc.job)
			require.Error(t, err)
			require.ErrorIs(t, err, job.ErrInvalid)
			ie, ok := errors.AsType[*job.InvalidError](err)
			require.True(t, ok)
			assert.Equal(t, tc.field, ie.Field)
			assert.Contains(t, err.Error(), tc.want)
			if tc.field == "Options.LockTTL" && tc.name != "negative TTL" {
				assert.ErrorIs(t, err, redlock.ErrInvalidTTL)
			}
			assert.Equal(t, before, s.Entries(), "nothing half-registered")
		})
	}
	assert.ErrorIs(t, s.Add(with(func(j *job.Job) { j.Name = "existing" })), scheduler.ErrDuplicate)

	require.NoError(t, s.Stop(context.Background()))
	assert.ErrorIs(t, s.Add(ok), scheduler.ErrStopped)
	assert.ErrorIs(t, s.Start(), scheduler.ErrStopped)
	assert.Equal(t, before, s.Entries())
}

func TestEntriesAndRemove(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, s.Add(job.Job{Name: "b", Spec: "@every 1m", Handler: nop}))
	require.NoError(t, s.Add(job.Job{Name: "a", Spec: "0 0 * * * *", Handler: nop}))
	minute := time.Date(2025, 1, 1, 0, 1, 0, 0, time.UTC)
	assert.Equal(t, []scheduler.Entry{
		{Name: "a", Spec: "0 0 * * * *", Schedule: "0 0 * * * *", Next: time.Date(2025, 1, 1, 1, 0, 0, 0, time.UTC)},
		{Name: "b", Spec: "@every 1m", Schedule: "@every 1m", Next: minute},
	}, s.Entries())

	require.NoError(t, s.Start())
	assert.ErrorIs(t, s.Start(), scheduler.ErrStarted)
	assert.Equal(t, minute, advance(t, clock, 1))
	led.waitOutcome(t, "b ran", func(o tickOutcome) bool { return o.Job == "b" && o.Outcome == outcome.Ran })
	e := s.Entries()[1]
	assert.Equal(t, minute, e.Prev)
	assert.Equal(t, minute.Add(time.Minute), e.Next)

	require.NoError(t, s.Remove("b"))
	assert.ErrorIs(t, s.Remove("b"), scheduler.ErrUnknownJob)
	assert.Len(t, s.Entries(), 1)
	// The loop now waits for a's tick only.
	require.NoError(t, clock.BlockUntil(ctxT(t), 1))
	require.Eventually(t, func() bool {
		d, ok := clock.NextDeadline()
		return ok && d.Equal(time.Date(2025, 1, 1, 1, 0, 0, 0, time.UTC))
	}, waitLimit, time.Millisecond)
	// A job added while running gets its ticks.
	require.NoError(t, s.Add(job.Job{Name: "c", Spec: "@every 1m", Handler: nop}))
	assert.Equal(t, minute.Add(time.Minute), s.Entries()[1].Next)
}

// One replica, one tick: the handler sees the run's facts, and the tick is kept as done.
func TestTickRunsWithItsFacts(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithReplica("r1"),
		scheduler.WithPrefix("test"), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, s.Add(job.Job{Name: "facts", Spec: "@every 1m", Handler: led.handler(nop)}))
	require.NoError(t, s.Start())

	tick := advance(t, clock, 1)
	ev := led.waitEvent(t, "a run", func(event) bool { return true })
	assert.Equal(t, "facts", ev.Job)
	assert.Equal(t, "r1", ev.Replica)
	assert.True(t, tick.Equal(ev.Tick))
	assert.Equal(t, 1, ev.Attempt)
	assert.NotZero(t, ev.Token)
	led.waitOutcome(t, "ran", func(o tickOutcome) bool { return o.Outcome == outcome.Ran })
	tickKey := layout.TickKey("test", "facts", tick)
	assert.Equal(t, "{test:facts}:tick:1735689660000", tickKey)
	// Release returns once a quorum confirmed; the last node follows.
	require.Eventually(t, func() bool { return c.doneOnQuorum(t, tickKey) }, waitLimit, time.Millisecond, "kept as done: %q", c.states(t, tickKey))
	require.Eventually(t, func() bool { return c.exists(t, layout.RunKey("test", "facts")) == 0 }, waitLimit, time.Millisecond, "the run key is released")

	// The next tick gets a larger token.
	advance(t, clock, 1)
	ev2 := led.waitEvent(t, "second run", func(e event) bool { return e.Tick.After(tick) })
	assert.Greater(t, ev2.Token, ev.Token)
}

func TestOverlapForbidSkipsWhilePreviousRuns(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithReplica("r1"), scheduler.WithMiddleware(led.observe()))
	release := make(chan struct{})
	require.NoError(t, s.Add(job.Job{Name: "slow", Spec: "@every 1m", Handler: led.handler(func(ctx context.Context) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})}))
	require.NoError(t, s.Start())
	first := advance(t, clock, 1)
	require.Eventually(t, func() bool { return c.exists(t, layout.RunKey("cronlock", "slow")) >= 2 }, waitLimit, time.Millisecond)
	second := advance(t, clock, 1)
	o := led.waitOutcome(t, "second tick skipped", func(o tickOutcome) bool { return o.Tick.Equal(second) })
	assert.Equal(t, outcome.SkippedOverlap, o.Outcome)
	se, ok := errors.AsType[*job.SkipError](o.Err)
	require.True(t, ok)
	assert.Equal(t, job.SkipOverlap, se.Reason)
	assert.Equal(t, "r1", se.Holder)
	close(release)
	o = led.waitOutcome(t, "first tick ran", func(o tickOutcome) bool { return o.Tick.Equal(first) })
	assert.Equal(t, outcome.Ran, o.Outcome)
}

func TestOverlapAllowRunsTicksConcurrently(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()))
	// Each run blocks until two run at once; the most running at once is kept.
	var running, most atomic.Int32
	both := make(chan struct{})
	started := make(chan struct{}, 2)
	require.NoError(t, s.Add(job.Job{Name: "slow", Spec: "@every 1m", Options: job.Options{Overlap: job.Allow},
		Handler: led.handler(func(ctx context.Context) error {
			n := running.Add(1)
			most.Store(max(most.Load(), n)) // runs start one at a time: no race on most
			started <- struct{}{}
			if n == 2 {
				close(both)
			}
			defer running.Add(-1)
			select {
			case <-both:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})}))
	require.NoError(t, s.Start())
	first := advance(t, clock, 1)
	select {
	case <-started:
	case <-time.After(waitLimit):
		t.Fatal("the first tick did not start")
	}
	second := advance(t, clock, 1)
	for _, tick := range []time.Time{first, second} {
		o := led.waitOutcome(t, "ran", func(o tickOutcome) bool { return o.Tick.Equal(tick) })
		assert.Equal(t, outcome.Ran, o.Outcome)
	}
	assert.EqualValues(t, 2, most.Load(), "the two runs overlapped")
	assert.Zero(t, c.exists(t, layout.RunKey("cronlock", "slow")), "Allow takes no run key")
}

// A failed run releases the tick, and is retried within the tick's window; the tick runs once
// in the end, by whichever replica got there.
func TestFailedRunIsRetried(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	var calls atomic.Int32
	for _, name := range []string{"r1", "r2", "r3"} {
		s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithReplica(name), scheduler.WithMiddleware(led.observe()))
		require.NoError(t, s.Add(job.Job{Name: "flaky", Spec: "@every 1m",
			Options: job.Options{Retries: 3, RetryBackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Second) }},
			Handler: led.handler(func(context.Context) error {
				if calls.Add(1) == 1 {
					return errors.New("transient")
				}
				return nil
			})}))
		require.NoError(t, s.Start())
	}
	tick := advance(t, clock, 3)
	led.waitEvent(t, "the failure", func(e event) bool { return e.Err != nil })
	// Three scheduler loops and the failed replica's retry backoff.
	advance(t, clock, 4)
	ok := led.waitEvent(t, "a success", func(e event) bool { return e.Err == nil })
	assert.True(t, ok.Tick.Equal(tick))
	assert.True(t, clock.Now().Before(tick.Add(time.Minute)), "within the tick's window")
	led.wait(t, "an outcome from each replica", func() bool { return len(led.outcomes) == 3 })
	outcomes, events := led.snapshot()
	assert.Len(t, events, 2, "one failure, one success")
	ran := 0
	for _, o := range outcomes {
		if o.Outcome == outcome.Ran {
			ran++
		} else {
			assert.ErrorIs(t, o.Err, job.ErrSkipped)
		}
	}
	assert.Equal(t, 1, ran)
}

// A panic is recovered, reported as a failure, and the tick's and the run's locks are
// released: the next tick runs.
func TestPanicIsRecoveredAndReleases(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()))
	var calls atomic.Int32
	require.NoError(t, s.Add(job.Job{Name: "boom", Spec: "@every 1m", Handler: func(context.Context) error {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return nil
	}}))
	require.NoError(t, s.Start())
	first := advance(t, clock, 1)
	o := led.waitOutcome(t, "the panic", func(o tickOutcome) bool { return o.Tick.Equal(first) })
	assert.Equal(t, outcome.Failed, o.Outcome)
	require.ErrorIs(t, o.Err, middleware.ErrPanic)
	pe, ok := errors.AsType[*middleware.PanicError](o.Err)
	require.True(t, ok)
	assert.Equal(t, "boom", pe.Value)
	assert.Contains(t, string(pe.Stack), "scheduler_test.go")
	require.Eventually(t, func() bool {
		return c.exists(t, layout.TickKey("cronlock", "boom", first)) == 0 && c.exists(t, layout.RunKey("cronlock", "boom")) == 0
	}, waitLimit, time.Millisecond, "released, not kept as done")

	second := advance(t, clock, 1)
	o = led.waitOutcome(t, "the next tick", func(o tickOutcome) bool { return o.Tick.Equal(second) })
	assert.Equal(t, outcome.Ran, o.Outcome)
}

// Stop lets a running job finish, fires no new tick, and leaves no lock behind.
func TestStopDrainsRunningJobs(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	lc := c.client(t, false)
	s, err := scheduler.New(lc, scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, err)
	started, finish := make(chan struct{}), make(chan struct{})
	require.NoError(t, s.Add(job.Job{Name: "drain", Spec: "@every 1m", Handler: led.handler(func(ctx context.Context) error {
		close(started)
		<-finish
		return ctx.Err()
	})}))
	require.NoError(t, s.Start())
	tick := advance(t, clock, 1)
	<-started
	stopped := make(chan error)
	go func() { stopped <- s.Stop(context.Background()) }()
	// The loop is gone: its timer is stopped, and no more ticks fire.
	require.Eventually(t, func() bool { return clock.Timers() == 0 }, waitLimit, time.Millisecond)
	clock.Advance(time.Hour)
	close(finish)
	require.NoError(t, <-stopped)
	require.NoError(t, lc.Close()) // waits for the release requests still in flight to the last node
	outcomes, events := led.snapshot()
	require.Len(t, events, 1)
	assert.NoError(t, events[0].CtxErr, "the job was not cancelled")
	require.Len(t, outcomes, 1)
	assert.Equal(t, outcome.Ran, outcomes[0].Outcome)
	assert.True(t, c.doneOnQuorum(t, layout.TickKey("cronlock", "drain", tick)), "kept as done")
	assert.Zero(t, c.exists(t, layout.RunKey("cronlock", "drain")))
	assert.ErrorIs(t, s.Add(job.Job{Name: "late", Spec: "@hourly", Handler: nop}), scheduler.ErrStopped)
	require.NoError(t, s.Stop(context.Background()), "Stop again")
}

// When Stop's context ends first, running jobs are cancelled with ErrStopped, Stop returns with
// the context's error, and the runs release their locks as they end (a second Stop waits for
// them).
func TestStopCancelsJobsWhenItsContextEnds(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	lc := c.client(t, false)
	s, err := scheduler.New(lc, scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, err)
	started := make(chan struct{})
	require.NoError(t, s.Add(job.Job{Name: "stubborn", Spec: "@every 1m", Handler: led.handler(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return context.Cause(ctx)
	})}))
	require.NoError(t, s.Start())
	tick := advance(t, clock, 1)
	<-started
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("shutdown grace period over"))
	err = s.Stop(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "shutdown grace period over")
	require.NoError(t, s.Stop(context.Background()), "the run ended")
	require.NoError(t, lc.Close()) // waits for the release requests still in flight to the last node
	_, events := led.snapshot()
	require.Len(t, events, 1)
	assert.ErrorIs(t, events[0].Cause, scheduler.ErrStopped)
	o := led.waitOutcome(t, "outcome", func(tickOutcome) bool { return true })
	assert.Equal(t, outcome.Stopped, o.Outcome, "cut short by Stop, not failed")
	assert.ErrorIs(t, o.Err, job.ErrStopped)
	assert.Zero(t, c.exists(t, layout.TickKey("cronlock", "stubborn", tick)), "released")
	assert.Zero(t, c.exists(t, layout.RunKey("cronlock", "stubborn")))
}

// A job longer than its lock's TTL keeps the lock by renewal: another replica that comes for
// the same tick after several TTLs is refused, and the tick runs once.
func TestLongJobKeepsItsLease(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	const ttl = 500 * time.Millisecond
	clockA, clockB := clocktest.NewFake(t0), clocktest.NewFake(t0)
	pastTTL := make(chan struct{})
	longJob := job.Job{Name: "long", Spec: "@every 1m", Options: job.Options{LockTTL: ttl},
		Handler: led.handler(func(ctx context.Context) error {
			if err := sleepCtx(ctx, 3*ttl); err != nil {
				return err
			}
			close(pastTTL)
			return sleepCtx(ctx, ttl)
		})}
	a := newScheduler(t, c.client(t, false), scheduler.WithClock(clockA), scheduler.WithReplica("a"), scheduler.WithMiddleware(led.observe()))
	b := newScheduler(t, c.client(t, false), scheduler.WithClock(clockB), scheduler.WithReplica("b"), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, a.Add(longJob))
	require.NoError(t, b.Add(longJob))
	require.NoError(t, a.Start())
	require.NoError(t, b.Start())
	tick := advance(t, clockA, 1)
	<-pastTTL // three TTLs into the run
	clockB.Set(tick)
	o := led.waitOutcome(t, "b's attempt", func(o tickOutcome) bool { return o.Replica == "b" })
	assert.Equal(t, outcome.SkippedHeld, o.Outcome)
	o = led.waitOutcome(t, "a's run", func(o tickOutcome) bool { return o.Replica == "a" })
	assert.Equal(t, outcome.Ran, o.Outcome)
	_, events := led.snapshot()
	require.Len(t, events, 1)
	assert.NoError(t, events[0].CtxErr)
	assert.Greater(t, events[0].End.Sub(events[0].Start), 3*ttl)
}

// Catch-up: a replica that starts after a tick was missed runs it once; one that starts after
// it ran sees it done.
func TestCatchUpRunsTheNewestMissedTickOnce(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	now := time.Date(2025, 1, 1, 0, 3, 20, 0, time.UTC)
	catchUp := job.Job{Name: "report", Spec: "@every 1m", Handler: led.handler(nop), Options: job.Options{CatchUp: 90 * time.Second}}
	plain := job.Job{Name: "plain", Spec: "@every 1m", Handler: led.handler(nop)}
	for _, name := range []string{"r1", "r2"} {
		s := newScheduler(t, c.client(t, false), scheduler.WithClock(clocktest.NewFake(now)), scheduler.WithReplica(name), scheduler.WithMiddleware(led.observe()))
		require.NoError(t, s.Add(catchUp))
		require.NoError(t, s.Add(plain))
		require.NoError(t, s.Start())
		led.waitOutcome(t, name+" caught up", func(o tickOutcome) bool { return o.Replica == name })
		assert.Equal(t, time.Date(2025, 1, 1, 0, 3, 0, 0, time.UTC), s.Entries()[1].Prev.UTC(), "Prev is the caught-up tick")
		assert.True(t, s.Entries()[0].Prev.IsZero(), "no catch-up without CatchUp")
	}
	outcomes, events := led.snapshot()
	require.Len(t, events, 1)
	assert.Equal(t, "report", events[0].Job)
	assert.Equal(t, time.Date(2025, 1, 1, 0, 3, 0, 0, time.UTC), events[0].Tick.UTC(), "the newest missed tick")
	require.Len(t, outcomes, 2)
	assert.Equal(t, outcome.Ran, outcomes[0].Outcome)
	assert.Equal(t, outcome.SkippedDone, outcomes[1].Outcome)
}

// DST with the scheduler's own loop, through a fall-back night and a spring-forward night in
// New York: a fixed-hour job runs once each night, an hourly one follows real time.
func TestDSTWithTheLoop(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		from  time.Time
		spec  string
		until time.Time
		want  []string
	}{
		{"repeated hour, fixed time", time.Date(2024, 11, 3, 0, 0, 0, 0, ny), "30 1 * * *", time.Date(2024, 11, 3, 4, 0, 0, 0, ny),
			[]string{"01:30 EDT"}},
		{"repeated hour, hourly", time.Date(2024, 11, 3, 0, 30, 0, 0, ny), "0 * * * *", time.Date(2024, 11, 3, 3, 0, 0, 0, ny),
			[]string{"01:00 EDT", "01:00 EST", "02:00 EST", "03:00 EST"}},
		{"skipped hour, fixed time", time.Date(2024, 3, 10, 0, 0, 0, 0, ny), "30 2 * * *", time.Date(2024, 3, 10, 5, 0, 0, 0, ny),
			[]string{"03:00 EDT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, false)
			led := newLedger()
			clock := clocktest.NewFake(tc.from)
			s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithLocation(ny), scheduler.WithMiddleware(led.observe()))
			require.NoError(t, s.Add(job.Job{Name: "dst", Spec: tc.spec, Handler: led.handler(nop)}))
			require.NoError(t, s.Start())
			for n := 1; ; n++ {
				require.NoError(t, clock.BlockUntil(ctxT(t), 1))
				d, _ := clock.NextDeadline()
				if d.After(tc.until) {
					break
				}
				clock.Set(d)
				led.wait(t, "the tick's outcome", func() bool { return len(led.outcomes) == n })
			}
			_, events := led.snapshot()
			var got []string
			for _, e := range events {
				got = append(got, e.Tick.In(ny).Format("15:04 MST"))
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// With a majority of nodes unreachable, the lock middleware retries until the tick's window
// closes and reports quorum_unavailable; once the nodes are back, ticks run again.
func TestQuorumUnavailableUntilTheWindowCloses(t *testing.T) {
	c := newCluster(t, 3, true)
	led := newLedger()
	s := newScheduler(t, c.client(t, true, redlock.WithNodeTimeout(20*time.Millisecond)), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, s.Add(job.Job{Name: "q", Spec: "@every 300ms", Options: job.Options{LockTTL: time.Second}, Handler: led.handler(nop)}))
	c.Proxies[0].Blackhole(true)
	c.Proxies[1].Blackhole(true)
	require.NoError(t, s.Start())
	o := led.waitOutcome(t, "quorum unavailable", func(o tickOutcome) bool { return o.Outcome == outcome.QuorumUnavailable })
	assert.ErrorIs(t, o.Err, redlock.ErrQuorumUnavailable)
	assert.ErrorContains(t, o.Err, "window closed")
	c.Proxies[0].Blackhole(false)
	c.Proxies[1].Blackhole(false)
	led.waitOutcome(t, "a run", func(o tickOutcome) bool { return o.Outcome == outcome.Ran })
}
