package middleware

// Pure logic of the observability plumbing: traceparent metadata, attempt results, the nil
// probe. No Redis.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

func TestTraceparentRoundTrip(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	s := formatTraceparent(sc)
	assert.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", s) // the W3C spec's example
	got, ok := parseTraceparent(s)
	require.True(t, ok)
	assert.Equal(t, sc.TraceID(), got.TraceID())
	assert.Equal(t, sc.SpanID(), got.SpanID())
	assert.Equal(t, sc.TraceFlags(), got.TraceFlags())
	assert.True(t, got.IsRemote())

	for _, bad := range []string{
		"",
		layout.SkippedMarker,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // unknown version
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // zero span id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",  // flags
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011", // too long
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // upper case
	} {
		_, ok := parseTraceparent(bad)
		assert.False(t, ok, "%q", bad)
	}
}

func TestAttemptResult(t *testing.T) {
	tickKey := layout.TickKey("p", "j", time.UnixMilli(0))
	refused := func(h *redlock.Holder) error {
		return fmt.Errorf("wrapped: %w", &redlock.AcquireError{Key: tickKey, Reason: redlock.ErrNotAcquired, Holder: h})
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, resultAcquired},
		{refused(nil), resultHeld},
		{refused(&redlock.Holder{Key: tickKey, Label: "r1"}), resultHeld},
		{refused(&redlock.Holder{Key: tickKey, Done: true}), resultDone},
		{refused(&redlock.Holder{Key: tickKey, Done: true, Metadata: layout.SkippedMarker}), resultOverlap},
		{refused(&redlock.Holder{Key: layout.RunKey("p", "j")}), resultOverlap},
		{&redlock.AcquireError{Reason: redlock.ErrQuorumUnavailable}, resultUnavailable},
		{context.Canceled, resultError},
	} {
		assert.Equal(t, tc.want, attemptResult(tc.err, tickKey), "%v", tc.err)
	}
}

// Without a recording span or Metrics in the context, Lock makes no probe, and a nil probe
// does nothing, without allocating.
func TestNilProbe(t *testing.T) {
	ctx := job.NewContext(context.Background(), &job.Run{Job: "j", Tick: time.UnixMilli(0)})
	require.Nil(t, newLockProbe(ctx))
	var p *lockProbe
	run := &job.Run{Job: "j"}
	assert.Empty(t, p.metadata())
	assert.Equal(t, ctx, p.startRun(ctx, run))
	renewErr := errors.New("x")
	allocs := testing.AllocsPerRun(100, func() {
		_ = newLockProbe(ctx)
		_ = p.metadata()
		p.beginAttempt()
		p.attempt(lockseam.Attempt{Number: 1})
		p.endAttempt(renewErr)
		_ = p.startRun(ctx, run)
		p.renewal(lockseam.Renewal{Err: renewErr})
		p.endRun(nil, false, nil, time.Time{})
		p.startRelease(true)
		p.endRelease(nil)
		p.done(nil)
	})
	assert.Zero(t, allocs)
}
