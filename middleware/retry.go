package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/cronlock/cronlock/internal/jitter"
	"github.com/cronlock/cronlock/job"
)

// RetryPolicy says how Retry tries a failed run again.
type RetryPolicy struct {
	// Retries is how many times a failed run is tried again. Default 0: Retry calls the
	// handler once.
	Retries int
	// BackOff returns a fresh schedule of waits between attempts; it is called once per call
	// of the handler, so schedules are never shared. Default: exponential from 1s, doubling up to 1
	// minute, with full jitter (each wait uniform in [0, step]).
	BackOff func() backoff.BackOff
	// Clock is used to wait and to check the tick's deadline. Default SystemClock.
	Clock Clock
	// Stop, once closed, ends the retries: no attempt starts after it, and a wait for the
	// next attempt is given up at once, with an error matching job.ErrStopped (and the last
	// attempt's error). The scheduler closes it when it is stopping. Default nil: never.
	Stop <-chan struct{}
}

// defaultRetryBackOff returns a fresh retry schedule: RetryPolicy.BackOff's default.
func defaultRetryBackOff() backoff.BackOff {
	return jitter.Exponential(time.Second, time.Minute)
}

// Retry calls the handler again when it fails, up to p.Retries times, waiting on p.BackOff
// between attempts. Each attempt gets a copy of the job.Run with Attempt set (1 for the first).
//
// It does not retry manual runs (job.Run.Trigger: they run once), skips (job.ErrSkipped: the
// tick is someone else's, or done), errors wrapped with backoff.Permanent (returned
// unwrapped), errors matching job.ErrStopped, a run whose context has ended, or anything once
// p.Stop is closed. It stops when the next wait would end at or after the tick's deadline
// (job.Run.Deadline), so that a late retry cannot run a tick that another replica may already
// consider done. Put it
// outside Lock, so that every attempt takes the tick's lock again and sees if the tick was
// done elsewhere meanwhile.
func Retry(p RetryPolicy) Middleware {
	if p.BackOff == nil {
		p.BackOff = defaultRetryBackOff
	}
	if p.Clock == nil {
		p.Clock = SystemClock()
	}
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			base, ok := job.RunFrom(ctx)
			if !ok {
				base = &job.Run{}
			}
			var b backoff.BackOff
			var waits context.Context // ctx, also ended by p.Stop; made at the first wait
			for attempt := 1; ; attempt++ {
				r := *base
				r.Attempt = attempt
				err := next(job.NewContext(ctx, &r))
				if err == nil || attempt > p.Retries || base.Trigger != "" || !retryable(ctx, err) {
					var perm *backoff.PermanentError
					if errors.As(err, &perm) {
						return perm.Err
					}
					return err
				}
				if b == nil {
					b = p.BackOff()
				}
				wait := b.NextBackOff()
				if wait == backoff.Stop {
					return err
				}
				if !base.Deadline.IsZero() && !p.Clock.Now().Add(wait).Before(base.Deadline) {
					return fmt.Errorf("%w (not retried: the tick's window closes at %s)", err, base.Deadline.Format(time.RFC3339Nano))
				}
				if waits == nil {
					var free context.CancelFunc
					waits, free = untilStop(ctx, p.Stop)
					defer free()
				}
				if !sleep(p.Clock, wait, waits.Done()) {
					return errors.Join(err, context.Cause(waits))
				}
				if stopped(p.Stop) {
					return errors.Join(err, job.ErrStopped)
				}
			}
		}
	}
}

// retryable reports whether a failed attempt may be tried again.
func retryable(ctx context.Context, err error) bool {
	var perm *backoff.PermanentError
	switch {
	case ctx.Err() != nil, errors.Is(err, job.ErrSkipped), errors.Is(err, job.ErrStopped), errors.As(err, &perm):
		return false
	}
	return true
}
