package middleware

import (
	"context"

	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
)

// untilStop returns ctx, also cancelled with cause job.ErrStopped once stop is closed, and
// the func that frees it. A nil stop returns ctx itself. When stop is the Done channel of the
// scheduler's stopping context that ctx carries (a run's context does: schedseam.Stopping),
// the wait is registered on that context and costs no goroutine; a channel of the caller's
// own is watched by a goroutine until it closes or the func is called.
func untilStop(ctx context.Context, stop <-chan struct{}) (context.Context, context.CancelFunc) {
	if stop == nil {
		return ctx, func() {}
	}
	sctx, cancel := context.WithCancelCause(ctx)
	if stopped(stop) {
		cancel(job.ErrStopped)
		return sctx, func() {}
	}
	if stopping, ok := schedseam.Stopping(ctx, stop); ok {
		unwatch := context.AfterFunc(stopping, func() { cancel(job.ErrStopped) })
		return sctx, func() {
			unwatch()
			cancel(nil)
		}
	}
	go func() {
		select {
		case <-stop:
			cancel(job.ErrStopped)
		case <-sctx.Done():
		}
	}()
	return sctx, func() { cancel(nil) }
}

// stopped reports whether stop is closed; a nil stop never is.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
