package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
)

func TestOutcome(t *testing.T) {
	held := &redlock.AcquireError{Key: "k", Reason: redlock.ErrNotAcquired}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, outcome.Ran},
		{errors.New("x"), outcome.Failed},
		{&job.SkipError{Reason: job.SkipHeld, Err: held}, outcome.SkippedHeld},
		{fmt.Errorf("wrapped: %w", &job.SkipError{Reason: job.SkipDone}), outcome.SkippedDone},
		{&job.SkipError{Reason: job.SkipOverlap}, outcome.SkippedOverlap},
		{&job.SkipError{Reason: job.SkipLate}, outcome.SkippedLate},
		{&job.SkipError{Reason: job.SkipPaused, Pause: &job.Pause{Reason: "r"}}, outcome.SkippedPaused},
		{fmt.Errorf("ctx: %w", redlock.ErrLeaseLost), outcome.LeaseLost},
		{&redlock.AcquireError{Reason: redlock.ErrQuorumUnavailable}, outcome.QuorumUnavailable},
		{errors.Join(errors.New("x"), job.ErrStopped), outcome.Stopped},
		{fmt.Errorf("cut short: %w (%w)", context.Canceled, job.ErrStopped), outcome.Stopped},
	} {
		assert.Equal(t, tc.want, middleware.Outcome(tc.err), "%v", tc.err)
	}
}

func ExampleOutcome() {
	fmt.Println(middleware.Outcome(nil))
	fmt.Println(middleware.Outcome(&job.SkipError{Reason: job.SkipDone}))
	fmt.Println(middleware.Outcome(fmt.Errorf("sync: %w", redlock.ErrLeaseLost)))
	// Output:
	// ran
	// skipped_done
	// lease_lost
}

func TestPauseValueRoundTrip(t *testing.T) {
	p := job.Pause{Reason: "migration", Since: time.UnixMilli(1700000000123), By: "r1"}
	got := layout.ParsePause(layout.PauseValue(p))
	if got.Reason != p.Reason || !got.Since.Equal(p.Since) || got.By != p.By {
		t.Fatalf("round trip: got %+v, want %+v", got, p)
	}
	if got := layout.ParsePause("set by hand"); got.Reason != "set by hand" {
		t.Fatalf("a plain value is the reason: got %+v", got)
	}
}
