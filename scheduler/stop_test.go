package scheduler_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/locktest"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// After Stop is called no handler starts: 2,000 jobs share one tick, and Stop comes while
// their locks are being taken. Every tick whose handler had not started is given up with
// outcome stopped and released, not kept as done.
func TestStopStartsNoHandlerAfterItIsCalled(t *testing.T) {
	const jobs = 2000
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	lc := c.client(t, false)
	s, err := scheduler.New(lc, scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()),
		scheduler.WithLogger(slog.New(slog.DiscardHandler)), scheduler.WithHistorySize(0))
	require.NoError(t, err)
	var (
		mu     sync.Mutex
		starts []time.Time
	)
	tenth := make(chan struct{})
	for i := range jobs {
		require.NoError(t, s.Add(job.Job{Name: fmt.Sprintf("burst-%d", i), Spec: "@every 1m", Handler: func(context.Context) error {
			now := time.Now()
			mu.Lock()
			starts = append(starts, now)
			if len(starts) == 10 {
				close(tenth)
			}
			mu.Unlock()
			return nil
		}}))
	}
	require.NoError(t, s.Start())
	tick := advance(t, clock, 1)
	select {
	case <-tenth:
	case <-time.After(waitLimit):
		t.Fatal("no handler started")
	}
	stopAt := time.Now()
	require.NoError(t, s.Stop(context.Background()))

	mu.Lock()
	after, before := 0, len(starts)
	for _, st := range starts {
		if st.After(stopAt) {
			after++
		}
	}
	mu.Unlock()
	assert.Zero(t, after, "handlers started after Stop was called (of %d started)", before)
	outcomes, _ := led.snapshot()
	require.Len(t, outcomes, jobs, "every tick has an outcome")
	counts := map[string]int{}
	var stopped []string
	for _, o := range outcomes {
		counts[o.Outcome]++
		if o.Outcome == outcome.Stopped {
			stopped = append(stopped, o.Job)
			assert.ErrorIs(t, o.Err, job.ErrStopped)
		}
	}
	t.Logf("outcomes: %v; handlers started: %d", counts, before)
	assert.Equal(t, before, counts[outcome.Ran], "the runs that started drained")
	assert.Equal(t, jobs-before, counts[outcome.Stopped])
	require.NotEmpty(t, stopped, "Stop came too late to give up any tick: nothing proven")
	require.NoError(t, lc.Close())
	for _, name := range stopped[:min(len(stopped), 20)] {
		// Released on a quorum (a node that missed the release keeps the lock until its TTL),
		// and kept as done nowhere: another replica may still run it.
		states := c.states(t, layout.TickKey("cronlock", name, tick))
		assert.NotContains(t, states, "done", name)
		gone := 0
		for _, st := range states {
			if st == "<none>" {
				gone++
			}
		}
		assert.GreaterOrEqual(t, gone, 2, "%s: %v", name, states)
	}
}

// A failing job waiting for its retry when Stop is called is not tried again: the wait (on
// the scheduler's clock, which the test does not move) is given up at once, and Stop returns
// nil (no handler was running); the tick's outcome is stopped.
func TestStopStartsNoRetry(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()))
	failed := make(chan struct{}, 4)
	require.NoError(t, s.Add(job.Job{Name: "flaky", Spec: "@every 1m",
		Options: job.Options{Retries: 3, RetryBackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(10 * time.Second) }},
		Handler: led.handler(func(context.Context) error {
			failed <- struct{}{}
			return errors.New("flaky")
		})}))
	require.NoError(t, s.Start())
	advance(t, clock, 1)
	<-failed
	require.NoError(t, clock.BlockUntil(ctxT(t), 2), "the loop's timer and the retry's")
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(waitLimit):
		clock.Advance(time.Hour) // let the retry go, or the test's cleanup waits for it
		t.Fatal("Stop waited for the retry")
	}
	clock.Advance(time.Hour)
	outcomes, events := led.snapshot()
	require.Len(t, events, 1, "no attempt after Stop")
	require.Len(t, outcomes, 1)
	assert.Equal(t, outcome.Stopped, outcomes[0].Outcome)
	assert.ErrorIs(t, outcomes[0].Err, job.ErrStopped)
	assert.ErrorContains(t, outcomes[0].Err, "flaky", "the last attempt's error is kept")
}

// With no handler running, Stop returns nil at once, with a context that already ended,
// whatever the lock nodes do: in quarantine (every tick waits for them), two of three down,
// one that never answers (the trigger poller is subscribing to it). The node clients wait a
// minute for a reply: a Stop that waited for a node would not return within the test's limit.
func TestStopWithNothingRunningReturnsNilAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes func(t *testing.T) []string
		end   bool // end the quarantine
	}{
		{"healthy", func(t *testing.T) []string { return addrs(newCluster(t, 3, false)) }, true},
		{"in quarantine", func(t *testing.T) []string { return addrs(newCluster(t, 3, false)) }, false},
		{"two of three down", func(t *testing.T) []string {
			c := newCluster(t, 3, false)
			require.NoError(t, c.Servers[1].Kill())
			require.NoError(t, c.Servers[2].Kill())
			return addrs(c)
		}, false},
		{"one blackholed", func(t *testing.T) []string {
			a := addrs(newCluster(t, 2, false))
			hole, _ := locktest.Blackhole(t)
			return append([]string{hole}, a...)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc := slowNodesClient(t, tc.nodes(t), tc.end)
			ignore := goleak.IgnoreCurrent()
			clock := clocktest.NewFake(t0)
			led := newLedger()
			s, err := scheduler.New(lc, scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()),
				scheduler.WithLogger(slog.New(slog.DiscardHandler)), scheduler.WithHistorySize(0))
			require.NoError(t, err)
			for i := range 20 {
				require.NoError(t, s.Add(job.Job{Name: fmt.Sprintf("j%d", i), Spec: "@every 1m", Handler: led.handler(nop)}))
			}
			require.NoError(t, s.Start())
			advance(t, clock, 1)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			stopped := make(chan error, 1)
			go func() { stopped <- s.Stop(ctx) }()
			select {
			case err := <-stopped:
				require.NoError(t, err)
			case <-time.After(waitLimit):
				t.Fatal("Stop waited for the nodes")
			}
			outcomes, events := led.snapshot()
			for _, o := range outcomes {
				assert.Contains(t, []string{outcome.Ran, outcome.Stopped}, o.Outcome, "%v", o)
			}
			t.Logf("%d handlers ran", len(events))
			require.NoError(t, lc.Close())
			goleak.VerifyNone(t, ignore)
		})
	}
}

func addrs(c *cluster) []string {
	var out []string
	for _, s := range c.Servers {
		out = append(out, s.Addr())
	}
	return out
}

// slowNodesClient returns a redlock client over addrs whose node clients wait a minute to
// dial and read (the node timeout, 100ms, bounds the lock's requests), with the quarantine
// ended if end.
func slowNodesClient(t *testing.T, addrs []string, end bool) *redlock.Client {
	t.Helper()
	var nodes []redlock.Node
	for _, a := range addrs {
		nodes = append(nodes, locktest.SlowNode(t, a))
	}
	lc, err := redlock.New(nodes, redlock.WithNodeTimeout(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Close() })
	if end {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, lc.EndQuarantine(ctx))
	}
	return lc
}

// Stop called from inside a handler, with the handler's context, does not wait for the
// calling run: it returns, the handler returns, and a later Stop finds nothing left.
func TestStopFromInsideAHandler(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	lc := c.client(t, false)
	ignore := goleak.IgnoreCurrent()
	// Not stopped at cleanup: if Stop deadlocked, a cleanup Stop would hang too.
	s, err := scheduler.New(lc, scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, err)
	inner := make(chan error, 1)
	require.NoError(t, s.Add(job.Job{Name: "quitter", Spec: "@every 1m", Handler: led.handler(func(ctx context.Context) error {
		inner <- s.Stop(ctx)
		return nil
	})}))
	require.NoError(t, s.Start())
	tick := advance(t, clock, 1)
	select {
	case err := <-inner:
		require.NoError(t, err)
	case <-time.After(waitLimit):
		t.Fatal("Stop from inside the handler did not return")
	}
	o := led.waitOutcome(t, "the run", func(o tickOutcome) bool { return o.Tick.Equal(tick) })
	assert.Equal(t, outcome.Ran, o.Outcome, "the calling run was not cancelled")
	require.NoError(t, s.Stop(context.Background()), "a later Stop waits for the calling run")
	require.NoError(t, lc.Close())
	goleak.VerifyNone(t, ignore)
	assert.ErrorIs(t, s.Start(), scheduler.ErrStopped)
}

// A panic is logged at Error with its stack; a run cut short by Stop is logged as stopped, at
// Info, not as a failure.
func TestStopAndPanicLogs(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	var buf syncBuffer
	s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock),
		scheduler.WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	var calls atomic.Int32
	started := make(chan struct{})
	require.NoError(t, s.Add(job.Job{Name: "log", Spec: "@every 1m", Handler: func(ctx context.Context) error {
		if calls.Add(1) == 1 {
			panic("kaboom")
		}
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}}))
	require.NoError(t, s.Start())
	advance(t, clock, 1)
	require.Eventually(t, func() bool { return bytes.Contains(buf.Bytes(), []byte("kaboom")) }, waitLimit, time.Millisecond)
	advance(t, clock, 1)
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, s.Stop(ctx), "a running handler was cancelled")
	require.NoError(t, s.Stop(ctxT(t)), "the run ended")
	logs := buf.String()
	t.Log(logs)
	assert.Regexp(t, `level=ERROR msg="cronlock: tick" job=log .*outcome=failed .*kaboom.* stack=".*stop_test\.go`, logs)
	assert.Regexp(t, `level=INFO msg="cronlock: tick" job=log .*outcome=stopped`, logs)
	assert.NotContains(t, logs, "level=WARN")
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func (b *syncBuffer) String() string { return string(b.Bytes()) }

// Before Start, Entries computes Next from the current time.
func TestEntriesBeforeStart(t *testing.T) {
	c := newCluster(t, 1, false)
	clock := clocktest.NewFake(t0)
	s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock))
	require.NoError(t, s.Add(job.Job{Name: "e", Spec: "@every 1m", Handler: nop}))
	clock.Advance(5 * time.Minute)
	e := s.Entries()
	require.Len(t, e, 1)
	assert.Equal(t, t0.Add(5*time.Minute).Truncate(time.Minute).Add(time.Minute), e[0].Next)
}

// runUnderWay returns a scheduler over lc — with a fake clock, not stopped at cleanup — whose
// one job, name, runs work, once work started at the job's first tick, with the ledger of its
// runs and the tick.
func runUnderWay(t *testing.T, lc *redlock.Client, name string, work func(ctx context.Context) error) (*scheduler.Scheduler, *ledger, time.Time) {
	t.Helper()
	clock := clocktest.NewFake(t0)
	led := newLedger()
	s, err := scheduler.New(lc, scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()))
	require.NoError(t, err)
	started := make(chan struct{})
	require.NoError(t, s.Add(job.Job{Name: name, Spec: "@every 1m", Handler: led.handler(func(ctx context.Context) error {
		close(started)
		return work(ctx)
	})}))
	require.NoError(t, s.Start())
	tick := advance(t, clock, 1)
	<-started
	return s, led, tick
}

// A run's context carries the context that Stop ends, whose Done channel is the Stop of the
// job's Lock and Retry: they wait for Stop with it, at no goroutine per run.
func TestRunsCarryTheContextThatStopEnds(t *testing.T) {
	lc := newCluster(t, 3, false).client(t, false)
	ctxs := make(chan context.Context, 1)
	s, _, _ := runUnderWay(t, lc, "carrier", func(ctx context.Context) error {
		ctxs <- ctx
		return nil
	})
	stopping, ok := schedseam.Stopping(<-ctxs, scheduler.StopSignal(s))
	require.True(t, ok, "the run's context carries the scheduler's stopping context")
	require.NoError(t, s.Stop(ctxT(t)))
	assert.Error(t, stopping.Err(), "Stop ended it")
}

// Stop returns when its context ends, whatever the runs do: a handler that ignores its context
// is left running, and Stop's error matches the context's error and names the run. Another
// Stop whose context ended says the same at once; one with a live context waits for the run,
// and returns nil once it ended, with every goroutine gone.
func TestStopReturnsByItsContextsEnd(t *testing.T) {
	lc := newCluster(t, 3, false).client(t, false)
	ignore := goleak.IgnoreCurrent()
	// Not stopped at cleanup: a cleanup Stop would wait for the handler the test holds.
	release := make(chan struct{})
	s, led, tick := runUnderWay(t, lc, "deaf", func(context.Context) error {
		<-release // not ctx.Done()
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	var err error
	select {
	case err = <-stopped:
	case <-time.After(waitLimit):
		close(release) // lets the old Stop return, and the test end
		t.Fatal("Stop waited for a handler that ignores its context")
	}
	t.Log(err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	left := `job "deaf" tick ` + tick.UTC().Format(time.RFC3339Nano) + ` attempt 1 (running)`
	assert.ErrorContains(t, err, left)
	assert.True(t, schedseam.RunsLeft(err))
	outcomes, _ := led.snapshot()
	assert.Empty(t, outcomes, "the run is under way")

	ended, end := context.WithCancel(context.Background())
	end()
	err = s.Stop(ended)
	require.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, left)
	assert.True(t, schedseam.RunsLeft(err))

	close(release)
	require.NoError(t, s.Stop(context.Background()), "a later Stop waits for the run left")
	outcomes, events := led.snapshot()
	require.Len(t, events, 1)
	assert.ErrorIs(t, events[0].Cause, scheduler.ErrStopped, "the run's context was cancelled")
	require.Len(t, outcomes, 1, "the run ended under the scheduler")
	require.NoError(t, lc.Close())
	goleak.VerifyNone(t, ignore)
}

// Once its context ends, Stop does not wait long for the runs it cancelled to release their
// locks and write their records either (a second from its call at most): with every node out
// of reach, each of those waits for a node timeout, here 3s. The run is named as left, and a
// later Stop waits for it.
func TestStopDoesNotWaitForCancelledRunsToFinish(t *testing.T) {
	c := newCluster(t, 3, true)
	lc := c.client(t, true, redlock.WithNodeTimeout(3*time.Second))
	s, led, tick := runUnderWay(t, lc, "polite", func(ctx context.Context) error {
		<-ctx.Done()
		return context.Cause(ctx)
	})
	for _, p := range c.Proxies {
		p.Blackhole(true)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Stop(ctx)
	t.Log(err)
	require.ErrorIs(t, err, context.Canceled)
	assert.Regexp(t, `job "polite" tick `+regexp.QuoteMeta(tick.UTC().Format(time.RFC3339Nano))+` attempt 1 \((running|finishing)\)`, err.Error())
	for _, p := range c.Proxies {
		p.Blackhole(false)
	}
	require.NoError(t, s.Stop(ctxT(t)), "a later Stop waits for the run left")
	o := led.waitOutcome(t, "the run's outcome", func(tickOutcome) bool { return true })
	assert.Equal(t, outcome.Stopped, o.Outcome)
	require.NoError(t, lc.Close()) // the proxies' goroutines end at cleanup: TestMain's goleak checks
}
