// Package middleware wraps job handlers: a Middleware is func(job.Handler) job.Handler, and
// Chain composes them outermost first, like robfig/cron's JobWrapper chains.
//
// The built-ins are what the scheduler puts around every job, in this order (outermost
// first): your own middleware (scheduler.WithMiddleware), Retry, Lock, Timeout, Recover, then
// the job's func.
//
//   - Lock takes the tick's lock on the Redis nodes (package redlock), runs the handler only
//     if it got it, under the lock's lease, and keeps the tick as done when the handler
//     succeeds. Every other replica skips the tick (a *job.SkipError). It is what makes a tick
//     run once in the cluster.
//   - Retry calls the chain below it again after a failure, while the tick's window is open.
//     Being outside Lock, every retry takes the tick's lock anew, so it stops as soon as
//     another replica ran the tick.
//   - Timeout bounds one attempt. Recover turns a panic into an error (*PanicError), so the
//     lock is released and the process lives on.
//
// Two more are yours to add, outermost, with scheduler.WithMiddleware:
//
//   - Trace records each tick on each replica as an OpenTelemetry span, "cronlock.tick", with
//     its outcome; Lock adds under it a span per acquire attempt, the run (with the lease's
//     renewals and loss as events) and the release. A replica that skips a tick links its
//     span to the span of the replica that holds or ran it.
//   - Metrics records OpenTelemetry metrics: ticks by outcome, job duration, acquire latency
//     and failures, lock hold time, renewal failures, runs cut short.
//
// Both use the OpenTelemetry API only; without them, Lock records nothing and allocates
// nothing for it. docs/observability.md lists every span, attribute, event and instrument.
//
// FromJobWrapper and ToJobWrapper adapt robfig/cron's JobWrapper, where that makes sense (see
// each for what does not carry over).
//
// # Guarantees
//
// With Lock, for one job and one tick instant: at most one handler call runs at a time in the
// cluster; once a call succeeded no call starts again (the tick is kept as done for
// LockConfig.KeepDone); a replica takes a tick over only after the previous holder failed and
// released it, or lost its lease — and then the previous handler's context was cancelled with
// cause redlock.ErrLeaseLost before the lock could expire. Each call gets a fencing token
// (job.Run.FencingToken) larger than every earlier one of the job.
//
// # What it does not guarantee
//
// A handler that ignores its context can go on after its lease was lost, while another
// replica runs the tick: pass the fencing token to storage that refuses stale tokens. A tick
// whose every replica was down, or whose lock nodes were unavailable until its window
// closed, does not run. Side effects are not made exactly-once: a handler that did its work
// and then failed is retried.
//
// # API at a glance
//
//	Task                         Identifiers
//	---------------------------  ------------------------------------------------------------
//	composing                    Middleware, Chain, FromJobWrapper, ToJobWrapper
//	the cluster lock             Lock, LockConfig, DefaultPrefix
//	bounding a run               Timeout, ErrTimeout, Recover, ErrPanic, PanicError
//	retries                      Retry, RetryPolicy, ErrNoAttemptsLeft
//	observing                    Metrics (MetricsOption, WithMeterProvider, ZeroRuns), Trace
//	                             (TraceOption, WithTracerProvider)
//	outcomes of a tick           Outcome (its doc lists the strings it returns), ErrInterrupted
//	testing with a fake clock    Clock, Timer, SystemClock
package middleware
