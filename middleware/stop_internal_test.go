package middleware

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
)

// ended waits for ctx to end (failing after a limit that only a broken untilStop reaches),
// and returns its cause.
func ended(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(30 * time.Second):
		t.Fatal("the context did not end")
		return nil
	}
}

// untilStop's context ends with cause job.ErrStopped when stop closes, at once if it is closed
// already, with its parent's cause when the parent ends first, and not by a stop after it was
// freed — whether stop is a channel of the caller's own, the Done channel of the scheduler's
// stopping context carried by ctx, or a channel other than the carried context's. A nil stop
// gives ctx itself.
func TestUntilStop(t *testing.T) {
	for name, carry := range map[string]func(stopping context.Context) context.Context{
		"own channel": func(context.Context) context.Context { return context.Background() },
		"scheduler's stopping": func(stopping context.Context) context.Context {
			return schedseam.WithStopping(context.Background(), stopping)
		},
		"another scheduler's": func(context.Context) context.Context {
			return schedseam.WithStopping(context.Background(), context.Background())
		},
	} {
		t.Run(name, func(t *testing.T) {
			stopping, stop := context.WithCancel(context.Background())
			defer stop()
			ctx := carry(stopping)
			waiting, free := untilStop(ctx, stopping.Done())
			defer free()
			freed, freeNow := untilStop(ctx, stopping.Done())
			freeNow()
			parent, endParent := context.WithCancelCause(ctx)
			child, freeChild := untilStop(parent, stopping.Done())
			defer freeChild()
			errParent := errors.New("the parent ended")
			endParent(errParent)
			assert.ErrorIs(t, ended(t, child), errParent)
			require.NoError(t, waiting.Err(), "ended before stop")

			stop()
			assert.ErrorIs(t, ended(t, waiting), job.ErrStopped)
			assert.ErrorIs(t, ended(t, freed), context.Canceled)
			assert.NotErrorIs(t, context.Cause(freed), job.ErrStopped)
			late, freeLate := untilStop(ctx, stopping.Done())
			defer freeLate()
			require.Error(t, late.Err(), "a stop closed already ends it at once")
			assert.ErrorIs(t, context.Cause(late), job.ErrStopped)
		})
	}
	ctx := context.Background()
	got, free := untilStop(ctx, nil)
	free()
	assert.Equal(t, ctx, got)
}

// Waiting for the scheduler's Stop costs no goroutine: a hundred runs that wait at once for
// the stopping context their contexts carry start none.
func TestUntilStopStartsNoGoroutineForTheSchedulersStop(t *testing.T) {
	stopping, stop := context.WithCancel(context.Background())
	defer stop()
	ctx := schedseam.WithStopping(context.Background(), stopping)
	const runs = 100
	before := runtime.NumGoroutine()
	var frees []context.CancelFunc
	for range runs {
		_, free := untilStop(ctx, stopping.Done())
		frees = append(frees, free)
	}
	assert.Less(t, runtime.NumGoroutine()-before, runs/10, "goroutines started by %d waits", runs)
	for _, free := range frees {
		free()
	}
}
