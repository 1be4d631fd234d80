package middleware

import (
	"context"

	"github.com/cronlock/cronlock/job"
)

// untilStop returns ctx, also cancelled with cause job.ErrStopped once stop is closed, and
// the func that frees it. A nil stop returns ctx itself.
func untilStop(ctx context.Context, stop <-chan struct{}) (context.Context, context.CancelFunc) {
	if stop == nil {
		return ctx, func() {}
	}
	sctx, cancel := context.WithCancelCause(ctx)
	if stopped(stop) {
		cancel(job.ErrStopped)
		return sctx, func() {}
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
