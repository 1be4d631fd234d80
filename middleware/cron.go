package middleware

import (
	"context"

	"github.com/robfig/cron/v3"

	"github.com/cronlock/cronlock/job"
)

// FromJobWrapper adapts a robfig/cron JobWrapper (e.g. cron.Recover with your logger) to a
// Middleware. The wrapper is applied anew at each call, to a cron.Job that calls the handler
// with the call's context and keeps its error, so the wrapper sees each run as a job of its
// own. Wrappers that keep state across runs of the same wrapped job — cron.SkipIfStillRunning,
// cron.DelayIfStillRunning — therefore do nothing here: use job.Options.Overlap instead, which
// works across the cluster. If the wrapper does not call the job (it skipped it), the handler
// returns nil.
func FromJobWrapper(w cron.JobWrapper) Middleware {
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			var err error
			w(cron.FuncJob(func() { err = next(ctx) })).Run()
			return err
		}
	}
}

// ToJobWrapper adapts a Middleware to a robfig/cron JobWrapper, for middleware that needs no
// job.Run in its context (Recover, Timeout, your own): Lock and Retry need the job's name and
// tick, which robfig/cron does not give: Lock returns an error without calling the job, and
// Retry runs it once. The cron.Job runs with context.Background(); the error the middleware
// returns goes to onError, if not nil.
func ToJobWrapper(m Middleware, onError func(error)) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		h := m(func(context.Context) error { j.Run(); return nil })
		return cron.FuncJob(func() {
			if err := h(context.Background()); err != nil && onError != nil {
				onError(err)
			}
		})
	}
}
