package scheduler

import (
	"context"
	"errors"
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
