package middleware

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/cronlock/cronlock/job"
)

// Middleware wraps a handler with behaviour of its own: it returns a handler that does
// something before, around or after calling next.
type Middleware func(next job.Handler) job.Handler

// Chain returns a Middleware that applies ms in order, outermost first:
// Chain(a, b, c)(h) is a(b(c(h))), so a sees the call first and the result last. Nil entries
// are skipped.
func Chain(ms ...Middleware) Middleware {
	return func(h job.Handler) job.Handler {
		for i := len(ms) - 1; i >= 0; i-- {
			if ms[i] != nil {
				h = ms[i](h)
			}
		}
		return h
	}
}

// ErrPanic is matched (errors.Is) by the error Recover returns for a panic.
var ErrPanic = errors.New("middleware: job panicked")

// PanicError is a recovered panic, with the stack where it happened. It matches ErrPanic, and
// unwraps to the panic value when that is an error.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("%v: %v", ErrPanic, e.Value) }

// Is reports whether target is ErrPanic.
func (e *PanicError) Is(target error) bool { return target == ErrPanic }

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Recover turns a panic in the handler into a *PanicError, so that the run counts as failed
// (and its lock is released, when Recover is inside Lock) instead of crashing the process.
// The scheduler puts it innermost, right around the job's func.
func Recover() Middleware {
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = &PanicError{Value: v, Stack: debug.Stack()}
				}
			}()
			return next(ctx)
		}
	}
}

// ErrTimeout is the cause with which Timeout cancels a run's context, and is matched by the
// run's error when the handler returned after the timeout.
var ErrTimeout = errors.New("middleware: job timed out")

// Timeout bounds each call of the handler to d: its context is cancelled with cause
// ErrTimeout when d has passed (on the real clock). If the handler then returns an error, the
// error matches ErrTimeout too. d ≤ 0 means no bound: the handler is returned unchanged.
func Timeout(d time.Duration) Middleware {
	return func(next job.Handler) job.Handler {
		if d <= 0 {
			return next
		}
		return func(ctx context.Context) error {
			tctx, cancel := context.WithTimeoutCause(ctx, d, ErrTimeout)
			defer cancel()
			err := next(tctx)
			if err != nil && !errors.Is(err, ErrTimeout) && errors.Is(context.Cause(tctx), ErrTimeout) {
				return fmt.Errorf("%w after %v: %w", ErrTimeout, d, err)
			}
			return err
		}
	}
}
