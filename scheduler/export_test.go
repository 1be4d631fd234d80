package scheduler

import (
	"context"
	"errors"
	"testing"
)

// IsSpecError reports whether err is, or wraps, the error of a malformed spec (specError),
// for the tests of package scheduler_test.
func IsSpecError(err error) bool {
	_, ok := errors.AsType[*specError](err)
	return ok
}

// Rescue makes one look of s's rescuer (rescue) at the runs in flight of its jobs, s running
// or not: prev holds the suspects of the look before, and it returns this look's.
func Rescue(ctx context.Context, s *Scheduler, prev map[string]bool) map[string]bool {
	return s.rescue(ctx, prev)
}

// SetRescueBatch sets how many keys one script of the rescuer reads on a node (rescueBatch),
// until the end of tb. Set it before any scheduler of the test starts.
func SetRescueBatch(tb testing.TB, n int) {
	old := rescueBatch
	rescueBatch = n
	tb.Cleanup(func() { rescueBatch = old })
}

// StopSignal returns the channel that s closes when it is stopping: its Lock and Retry
// middleware's Stop.
func StopSignal(s *Scheduler) <-chan struct{} { return s.stop }
