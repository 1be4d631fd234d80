package middleware_test

// The tests in this file are pure logic (Chain, Recover, Timeout, Retry, the robfig/cron
// adapters): they take no lock and need no Redis. Retry waits on a fake clock.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func traced(log *[]string, name string) middleware.Middleware {
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			*log = append(*log, name+" in")
			err := next(ctx)
			*log = append(*log, name+" out")
			return err
		}
	}
}

func TestChainIsOutermostFirst(t *testing.T) {
	var log []string
	h := middleware.Chain(traced(&log, "a"), nil, traced(&log, "b"))(func(context.Context) error {
		log = append(log, "job")
		return nil
	})
	require.NoError(t, h(context.Background()))
	assert.Equal(t, []string{"a in", "b in", "job", "b out", "a out"}, log)

	// No middleware: the handler itself runs, and its error comes back as it is.
	fail := errors.New("failed")
	var calls int
	err := middleware.Chain()(func(context.Context) error { calls++; return fail })(context.Background())
	assert.Equal(t, fail, err)
	assert.Equal(t, 1, calls)
}

func TestRecover(t *testing.T) {
	cause := errors.New("disk full")
	for _, v := range []any{"boom", cause, 42} {
		err := middleware.Recover()(func(context.Context) error { panic(v) })(context.Background())
		require.ErrorIs(t, err, middleware.ErrPanic)
		pe, ok := errors.AsType[*middleware.PanicError](err)
		require.True(t, ok)
		assert.Equal(t, v, pe.Value)
		assert.Contains(t, string(pe.Stack), "middleware_test.go")
		assert.Equal(t, v == any(cause), errors.Is(err, cause))
	}
	assert.NoError(t, middleware.Recover()(func(context.Context) error { return nil })(context.Background()))
}

func TestTimeout(t *testing.T) {
	waits := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	err := middleware.Timeout(10 * time.Millisecond)(waits)(context.Background())
	require.ErrorIs(t, err, middleware.ErrTimeout)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "after 10ms")

	// A job that returns in time is untouched, and so is an error unrelated to the timeout.
	other := errors.New("bad input")
	assert.Equal(t, other, middleware.Timeout(time.Hour)(func(context.Context) error { return other })(context.Background()))
	// d ≤ 0: no bound; the context has no deadline.
	assert.NoError(t, middleware.Timeout(0)(func(ctx context.Context) error {
		_, ok := ctx.Deadline()
		assert.False(t, ok)
		return nil
	})(context.Background()))
}

// runCtx returns a context carrying a Run for tick, with the given deadline.
func runCtx(tick, deadline time.Time) context.Context {
	return job.NewContext(context.Background(), &job.Run{Job: "j", Tick: tick, Attempt: 1, Replica: "r", Deadline: deadline})
}

func constant(d time.Duration) func() backoff.BackOff {
	return func() backoff.BackOff { return backoff.NewConstantBackOff(d) }
}

func TestRetryRetriesWithAttempts(t *testing.T) {
	clock := clocktest.NewFake(time.Unix(0, 0))
	var attempts []int
	h := middleware.Retry(middleware.RetryPolicy{Retries: 3, BackOff: constant(time.Second), Clock: clock})(func(ctx context.Context) error {
		r, _ := job.RunFrom(ctx)
		attempts = append(attempts, r.Attempt)
		if r.Attempt < 3 {
			return errors.New("transient")
		}
		return nil
	})
	done := make(chan error)
	go func() { done <- h(runCtx(time.Unix(0, 0), time.Time{})) }()
	for range 2 {
		require.NoError(t, clock.BlockUntil(context.Background(), 1))
		clock.Advance(time.Second)
	}
	require.NoError(t, <-done)
	assert.Equal(t, []int{1, 2, 3}, attempts)
}

func TestRetryGivesUp(t *testing.T) {
	clock := clocktest.NewFake(time.Unix(0, 0))
	policy := middleware.RetryPolicy{Retries: 5, BackOff: constant(time.Second), Clock: clock}
	count := func(err error) (job.Handler, *atomic.Int32) {
		var n atomic.Int32
		return func(context.Context) error { n.Add(1); return err }, &n
	}

	t.Run("skips are final", func(t *testing.T) {
		h, n := count(&job.SkipError{Reason: job.SkipHeld})
		assert.ErrorIs(t, middleware.Retry(policy)(h)(runCtx(time.Unix(0, 0), time.Time{})), job.ErrSkipped)
		assert.EqualValues(t, 1, n.Load())
	})
	t.Run("permanent errors are final and unwrapped", func(t *testing.T) {
		bad := errors.New("bad config")
		h, n := count(backoff.Permanent(bad))
		assert.Equal(t, bad, middleware.Retry(policy)(h)(runCtx(time.Unix(0, 0), time.Time{})))
		assert.EqualValues(t, 1, n.Load())
	})
	t.Run("no retry that would start at the tick's deadline", func(t *testing.T) {
		h, n := count(errors.New("transient"))
		err := middleware.Retry(policy)(h)(runCtx(time.Unix(0, 0), time.Unix(1, 0)))
		assert.ErrorContains(t, err, "not retried: the tick's window closes")
		assert.EqualValues(t, 1, n.Load())
	})
	t.Run("retries are counted", func(t *testing.T) {
		h, n := count(errors.New("transient"))
		p := policy
		p.Retries = 2
		done := make(chan error)
		go func() { done <- middleware.Retry(p)(h)(runCtx(time.Unix(0, 0), time.Time{})) }()
		for range 2 {
			require.NoError(t, clock.BlockUntil(context.Background(), 1))
			clock.Advance(time.Second)
		}
		assert.ErrorContains(t, <-done, "transient")
		assert.EqualValues(t, 3, n.Load())
	})
	t.Run("a cancelled run is not retried", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(runCtx(time.Unix(0, 0), time.Time{}))
		stop := errors.New("stopping")
		var n atomic.Int32
		h := func(context.Context) error { n.Add(1); cancel(stop); return errors.New("interrupted") }
		err := middleware.Retry(policy)(h)(ctx)
		assert.ErrorContains(t, err, "interrupted")
		assert.EqualValues(t, 1, n.Load())
	})
	t.Run("cancelled while waiting", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(runCtx(time.Unix(0, 0), time.Time{}))
		h, n := count(errors.New("transient"))
		done := make(chan error)
		go func() { done <- middleware.Retry(policy)(h)(ctx) }()
		require.NoError(t, clock.BlockUntil(context.Background(), 1))
		stop := errors.New("stopping")
		cancel(stop)
		err := <-done
		assert.ErrorIs(t, err, stop)
		assert.ErrorContains(t, err, "transient")
		assert.EqualValues(t, 1, n.Load())
	})
}

func TestFromJobWrapper(t *testing.T) {
	var seen []string
	w := func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { seen = append(seen, "before"); j.Run(); seen = append(seen, "after") })
	}
	fail := errors.New("failed")
	err := middleware.FromJobWrapper(w)(func(context.Context) error { seen = append(seen, "job"); return fail })(context.Background())
	assert.Equal(t, fail, err)
	assert.Equal(t, []string{"before", "job", "after"}, seen)

	// cron.Recover turns the panic into a log line; the handler's result is then nil.
	var logged atomic.Int32
	logger := cron.PrintfLogger(printf(func(string, ...any) { logged.Add(1) }))
	err = middleware.FromJobWrapper(cron.Recover(logger))(func(context.Context) error { panic("x") })(context.Background())
	assert.NoError(t, err)
	assert.EqualValues(t, 1, logged.Load())
}

type printf func(string, ...any)

func (p printf) Printf(format string, args ...any) { p(format, args...) }

func TestToJobWrapper(t *testing.T) {
	var errs []error
	w := middleware.ToJobWrapper(middleware.Recover(), func(err error) { errs = append(errs, err) })
	ran := false
	w(cron.FuncJob(func() { ran = true })).Run()
	assert.True(t, ran)
	assert.Empty(t, errs)
	w(cron.FuncJob(func() { panic("boom") })).Run()
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], middleware.ErrPanic)

	// Lock needs a job.Run, which robfig/cron does not give.
	w = middleware.ToJobWrapper(middleware.Lock(nil, middleware.LockConfig{}), func(err error) { errs = append(errs, err) })
	w(cron.FuncJob(func() { t.Error("ran without a lock") })).Run()
	assert.ErrorIs(t, errs[1], middleware.ErrNoRun)
}

func ExampleChain() {
	logging := func(name string) middleware.Middleware {
		return func(next job.Handler) job.Handler {
			return func(ctx context.Context) error {
				fmt.Println(name, "before")
				err := next(ctx)
				fmt.Println(name, "after:", err)
				return err
			}
		}
	}
	h := middleware.Chain(logging("outer"), logging("inner"), middleware.Recover())(func(context.Context) error {
		panic("oops")
	})
	_ = h(context.Background())
	// Output:
	// outer before
	// inner before
	// inner after: middleware: job panicked: oops
	// outer after: middleware: job panicked: oops
}

func ExampleRetry() {
	calls := 0
	flaky := func(ctx context.Context) error {
		calls++
		r, _ := job.RunFrom(ctx)
		fmt.Println("attempt", r.Attempt)
		if calls < 3 {
			return errors.New("connection reset")
		}
		return nil
	}
	retry := middleware.Retry(middleware.RetryPolicy{
		Retries: 5,
		BackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) },
	})
	ctx := job.NewContext(context.Background(), &job.Run{Job: "sync", Tick: time.Now()})
	fmt.Println("error:", retry(flaky)(ctx))
	// Output:
	// attempt 1
	// attempt 2
	// attempt 3
	// error: <nil>
}
