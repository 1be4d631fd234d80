package middleware

import (
	"context"
	"encoding/hex"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

// TraceOption configures Trace.
type TraceOption func(*traceConfig)

type traceConfig struct {
	tp trace.TracerProvider
}

// WithTracerProvider sets where Trace's spans go. Default: otel.GetTracerProvider() at the
// time Trace is called (the global provider, which forwards to one set later with
// otel.SetTracerProvider). A nil provider means the default.
func WithTracerProvider(tp trace.TracerProvider) TraceOption {
	return func(c *traceConfig) { c.tp = tp }
}

// Trace records each tick on this replica as a span named "cronlock.tick", with the job's
// name, the tick's scheduled instant (Unix milliseconds), its planned start when that is not
// the instant ("cronlock.planned_start", Unix milliseconds: job.Run.PlannedStart, the tick
// delayed by job.Options.Jitter), the replica's name and the tick's
// outcome (Outcome: "ran", "failed", "skipped_held", "skipped_done", "skipped_overlap",
// "skipped_late", "skipped_paused", "lease_lost", "quorum_unavailable", "stopped" or
// "interrupted" — a run of another replica that vanished, which the scheduler's rescuer
// passes through its middleware once it recorded it (scheduler.WithMiddleware); a
// skipped_paused span also has "cronlock.pause.reason"). Failures, lost leases and unavailable
// nodes are recorded as errors (span.RecordError and an Error status); skips and stopped ticks
// are not errors.
//
// Put it outermost (scheduler.WithMiddleware(middleware.Trace())), so that the span covers the
// whole tick. Lock, inside it, then adds child spans from the span in its context: one
// "cronlock.lock.acquire" span per acquire attempt, "cronlock.job.run" around the handler
// (the handler's context carries it, so spans the job starts are its children), with the
// lease's renewals and loss as events, and "cronlock.lock.release". Lock also stores the tick
// span's context (W3C traceparent) beside the tick's lock; a replica that skips the tick
// because another one holds it or ran it adds a span link to that span, so that every skip in
// the trace leads to the run that made it unnecessary. docs/observability.md lists every span,
// attribute and event.
//
// Trace uses only the OpenTelemetry API: with no SDK installed, spans are no-ops and cost a
// few nanoseconds. A context without a job.Run (see job.RunFrom) gets a span without the
// job's attributes.
func Trace(opts ...TraceOption) Middleware {
	var cfg traceConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	tracer := cfg.tp.Tracer(scope)
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) (err error) {
			// The attributes are set when the span ends, in one call: each call costs an
			// allocation, and the outcome is known only then.
			name := spanTick
			if run, ok := job.RunFrom(ctx); ok && run.Trigger != "" {
				name = spanTrigger
			}
			ctx, span := tracer.Start(ctx, name)
			if !span.IsRecording() {
				span.End()
				return next(ctx)
			}
			finished := false
			defer func() {
				if !finished { // a panic goes through: record it, and let it go on
					setTickAttributes(ctx, span, "", "")
					span.SetStatus(codes.Error, "panic")
				}
				span.End()
			}()
			err = next(ctx)
			finished = true
			endTick(ctx, span, err)
			return err
		}
	}
}

// endTick sets the tick span's attributes, its link to the holder of a skipped tick, and its
// error.
func endTick(ctx context.Context, span trace.Span, err error) {
	o := Outcome(err)
	var holder string
	switch o {
	case outcome.Ran, outcome.Replaced:
	case outcome.Failed, outcome.LeaseLost, outcome.QuorumUnavailable:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	default: // a skip
		se, ok := errors.AsType[*job.SkipError](err)
		if !ok {
			break
		}
		holder = se.Holder
		if sc, ok := holderSpan(se); ok {
			span.AddLink(trace.Link{SpanContext: sc})
		}
		if se.Pause != nil {
			span.SetAttributes(attrPause.String(se.Pause.Reason))
		}
	}
	setTickAttributes(ctx, span, o, holder)
}

// holderSpan returns the span of the run that holds the tick skipped with se, as Trace stored
// it beside that run's lock, if the lock nodes reported one.
func holderSpan(se *job.SkipError) (trace.SpanContext, bool) {
	ae, ok := errors.AsType[*redlock.AcquireError](se.Err)
	if !ok {
		return trace.SpanContext{}, false
	}
	h := skipHolder(ae)
	if h == nil {
		return trace.SpanContext{}, false
	}
	return parseTraceparent(lockTraceparent(h.Metadata))
}

// setTickAttributes sets the tick span's attributes, in one call.
func setTickAttributes(ctx context.Context, span trace.Span, outcome string, holder string) {
	var kv [8]attribute.KeyValue
	attrs := kv[:0]
	if run, ok := job.RunFrom(ctx); ok {
		attrs = append(attrs, attrJob.String(run.Job), attrTick.Int64(run.Tick.UnixMilli()), attrReplica.String(run.Replica))
		if !run.PlannedStart.IsZero() && !run.PlannedStart.Equal(run.Tick) {
			attrs = append(attrs, attrPlanned.Int64(run.PlannedStart.UnixMilli()))
		}
		if run.Trigger != "" {
			attrs = append(attrs, attrTrigger.String(run.Trigger))
		}
		if run.Backfill {
			attrs = append(attrs, attrBackfill.Bool(true))
		}
	}
	if outcome != "" {
		attrs = append(attrs, attrOutcome.String(outcome))
	}
	if holder != "" {
		attrs = append(attrs, attrHolder.String(holder))
	}
	span.SetAttributes(attrs...)
}

// formatTraceparent returns sc as a W3C traceparent header value (version 00):
// 00-<trace id>-<span id>-<flags>.
func formatTraceparent(sc trace.SpanContext) string {
	var b [55]byte
	copy(b[:], "00-")
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:])
}

// parseTraceparent reads a traceparent written by formatTraceparent; ok is false for
// anything else (an empty string, other metadata), or an invalid span context.
func parseTraceparent(s string) (sc trace.SpanContext, ok bool) {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return sc, false
	}
	tid, err := trace.TraceIDFromHex(s[3:35])
	if err != nil {
		return sc, false
	}
	sid, err := trace.SpanIDFromHex(s[36:52])
	if err != nil {
		return sc, false
	}
	var flags [1]byte
	if _, err := hex.Decode(flags[:], []byte(s[53:55])); err != nil {
		return sc, false
	}
	sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]), Remote: true})
	return sc, sc.IsValid()
}
