package middleware

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

// lockProbe reports what one call of Lock does: as child spans and events of the recording
// span in Lock's context (the tick span that Trace started), and as measurements of the
// instruments that Metrics put in the context. Lock makes one only when there is something to
// report, so that without Trace and Metrics it costs two context lookups and no allocation;
// every method is a no-op on a nil probe.
//
// Its methods are called from Lock's goroutine, except renewal, which the lease's goroutine
// calls: renewal reads only fields set before the lease started, and writes lostAt.
type lockProbe struct {
	ctx     context.Context // Lock's context, parent of the child spans
	tick    trace.Span      // the span in ctx; nil if it is not recording
	tracer  trace.Tracer
	m       *jobMetrics // nil without Metrics
	tickKey string

	attempts int
	span     trace.Span   // the current attempt's; nil between attempts and if not traced
	run      trace.Span   // cronlock.job.run; nil if not traced
	runStart time.Time    // when the lock was taken (read only with metrics)
	runEnd   time.Time    // when the handler returned (read only with metrics)
	release  trace.Span   // cronlock.lock.release; nil if not traced
	lostAt   atomic.Int64 // Unix ns at which a renewal found the lock lost; 0 if none did
}

// newLockProbe returns a probe for a Lock call with ctx, or nil when nothing observes it.
// Lock sets its tickKey.
func newLockProbe(ctx context.Context) *lockProbe {
	span := trace.SpanFromContext(ctx)
	m := metricsFrom(ctx)
	recording := span.IsRecording()
	if !recording && m == nil {
		return nil
	}
	p := &lockProbe{ctx: ctx, m: m}
	if recording {
		p.tick = span
		p.tracer = span.TracerProvider().Tracer(scope)
	}
	return p
}

// metadata returns what Lock stores beside the tick's lock: the tick span's context as a W3C
// traceparent, so that replicas that skip the tick can link to it; "" when not traced.
func (p *lockProbe) metadata() string {
	if p == nil || p.tick == nil {
		return ""
	}
	sc := p.tick.SpanContext()
	if !sc.IsValid() {
		return ""
	}
	return formatTraceparent(sc)
}

// beginAttempt starts the span of the next acquire attempt, "cronlock.lock.acquire"; Lock
// calls it just before each TryAcquire, and attempt ends it (and makes the spans of the
// attempts that TryAcquire makes again after a split vote).
func (p *lockProbe) beginAttempt() {
	if p == nil || p.tick == nil {
		return
	}
	_, p.span = p.tracer.Start(p.ctx, spanAcquire)
}

// attempt reports one acquire attempt, from redlock's attempt hook (lockseam.OnAttempt): it ends the attempt's
// span with what the attempt found, and measures it.
func (p *lockProbe) attempt(a lockseam.Attempt) {
	if p == nil {
		return
	}
	p.attempts++
	result := attemptResult(a.Err, p.tickKey)
	if m := p.m; m != nil {
		m.acquireDuration.Record(p.ctx, a.Elapsed.Seconds(), m.result(result).record...)
		if a.Err != nil {
			m.acquireFailures.Add(p.ctx, 1, m.reason(result).add...)
		}
	}
	if p.tick == nil {
		return
	}
	span := p.span
	if span == nil { // an attempt that redlock made again after a split vote
		_, span = p.tracer.Start(p.ctx, spanAcquire, trace.WithTimestamp(time.Now().Add(-a.Elapsed)))
	}
	p.span = nil
	// One SetAttributes call per span, and node counts only when not zero: each call and
	// each attribute costs the SDK time.
	var kv [12]attribute.KeyValue
	attrs := append(kv[:0],
		attrLockAttempt.Int(p.attempts),
		attrLockResult.String(result),
		attrNodesOK.Int(a.OK),
		attrQuorum.Int(a.Quorum),
		attrElapsed.Float64(millis(a.Elapsed)),
	)
	for _, n := range [...]struct {
		key   attribute.Key
		count int
	}{{attrNodesRefused, a.Refused}, {attrNodesErrored, a.Failed}, {attrNodesQuar, a.Quarantined}} {
		if n.count > 0 {
			attrs = append(attrs, n.key.Int(n.count))
		}
	}
	if a.PrimaryFirst {
		attrs = append(attrs, attrPrimaryFirst.Bool(true))
	}
	switch result {
	case resultAcquired:
		attrs = append(attrs, attrValidity.Float64(millis(a.Validity)), attrToken.Int64(int64(a.Token)))
	case resultHeld, resultDone, resultOverlap, resultPaused:
		// A refusal is how a lock works, not an error: the holder is in the attributes.
		if ae, ok := errors.AsType[*redlock.AcquireError](a.Err); ok && ae.Holder != nil {
			attrs = append(attrs, attrHolder.String(ae.Holder.Label), attrHolderDone.Bool(ae.Holder.Done))
		}
	}
	span.SetAttributes(attrs...)
	if result == resultUnavailable || result == resultError {
		span.RecordError(a.Err)
		span.SetStatus(codes.Error, a.Err.Error())
	}
	span.End()
}

// endAttempt ends the span of an attempt that failed before redlock made it (an invalid
// request), with the error.
func (p *lockProbe) endAttempt(err error) {
	if p == nil || p.span == nil {
		return
	}
	if err != nil {
		p.span.RecordError(err)
		p.span.SetStatus(codes.Error, err.Error())
	}
	p.span.End()
	p.span = nil
}

// attemptResult classifies an attempt's error, as Lock's skip does.
func attemptResult(err error, tickKey string) string {
	switch {
	case err == nil:
		return resultAcquired
	case errors.Is(err, redlock.ErrNotAcquired):
		ae, ok := errors.AsType[*redlock.AcquireError](err)
		if _, refused := lockseam.Refusal(err); refused {
			return resultPaused
		}
		if !ok || ae.Holder == nil {
			return resultHeld
		}
		switch h := ae.Holder; {
		case h.Done && h.Metadata == layout.SkippedMarker:
			return resultOverlap
		case h.Done:
			return resultDone
		case h.Key != tickKey:
			return resultOverlap
		}
		return resultHeld
	case errors.Is(err, redlock.ErrQuorumUnavailable):
		return resultUnavailable
	}
	return resultError
}

// startRun starts the span "cronlock.job.run" as the lock was taken, and returns the context
// for the lease (and so the handler) with it.
func (p *lockProbe) startRun(ctx context.Context, run *job.Run) context.Context {
	if p == nil {
		return ctx
	}
	if p.m != nil {
		p.runStart = time.Now()
	}
	if p.tick == nil {
		return ctx
	}
	ctx, p.run = p.tracer.Start(ctx, spanRun)
	if run.Attempt > 1 {
		p.run.SetAttributes(attrToken.Int64(int64(run.FencingToken)), attrAttempt.Int(run.Attempt))
	} else {
		p.run.SetAttributes(attrToken.Int64(int64(run.FencingToken)))
	}
	return ctx
}

// renewal reports one renewal of the lease, from the lease's goroutine: an event on the run's
// span, and a failure in the metrics.
func (p *lockProbe) renewal(r lockseam.Renewal) {
	if p == nil {
		return
	}
	if r.Err == nil {
		if p.run != nil {
			p.run.AddEvent(eventRenewed, trace.WithAttributes(attrRenewal.Int(r.Number), attrValidity.Float64(millis(r.Validity))))
		}
		return
	}
	reason := renewalError
	switch {
	case errors.Is(r.Err, redlock.ErrLockLost):
		reason = renewalLockLost
		p.lostAt.Store(time.Now().UnixNano())
	case errors.Is(r.Err, redlock.ErrQuorumUnavailable):
		reason = renewalUnavailable
	}
	if m := p.m; m != nil {
		m.renewalFailures.Add(p.ctx, 1, m.reason(reason).add...)
	}
	if p.run != nil {
		p.run.AddEvent(eventRenewalFailed, trace.WithAttributes(attrRenewal.Int(r.Number), attrReason.String(reason), attrCause.String(r.Err.Error())))
	}
}

// endRun ends the run's span once the handler returned herr (nil for a panic, with panicked
// set), reporting the loss of the lease (lost, the lease's Err) as an event at the moment
// it happened: when a renewal found the lock gone, or else when the lease's validity ran out
// (validUntil).
func (p *lockProbe) endRun(herr error, panicked bool, lost error, validUntil time.Time) {
	if p == nil {
		return
	}
	replaced := errors.Is(lost, job.ErrReplaced)
	leaseLost := errors.Is(lost, redlock.ErrLeaseLost) && !replaced
	if m := p.m; m != nil {
		p.runEnd = time.Now()
		switch {
		case replaced:
			m.timeouts.Add(p.ctx, 1, m.cause(causeReplaced).add...)
		case leaseLost:
			m.timeouts.Add(p.ctx, 1, m.cause(causeLease).add...)
		case errors.Is(herr, ErrTimeout):
			m.timeouts.Add(p.ctx, 1, m.cause(causeTimeout).add...)
		}
	}
	s := p.run
	if s == nil {
		return
	}
	if leaseLost {
		at := validUntil
		if ns := p.lostAt.Load(); ns != 0 {
			at = time.Unix(0, ns)
		}
		if now := time.Now(); at.IsZero() || at.After(now) {
			at = now
		}
		s.AddEvent(eventLost, trace.WithTimestamp(at), trace.WithAttributes(attrCause.String(lost.Error())))
	}
	if replaced {
		s.AddEvent(eventReplaced, trace.WithAttributes(attrCause.String(lost.Error())))
	}
	switch {
	case panicked:
		s.SetStatus(codes.Error, "panic")
	case herr != nil && !replaced: // a replaced run was stopped, it did not fail
		s.RecordError(herr)
		s.SetStatus(codes.Error, herr.Error())
	case leaseLost:
		s.SetStatus(codes.Error, lost.Error())
	}
	s.End()
}

// startRelease starts the span "cronlock.lock.release".
func (p *lockProbe) startRelease(keepDone bool) {
	if p == nil || p.tick == nil {
		return
	}
	_, p.release = p.tracer.Start(p.ctx, spanRelease)
	p.release.SetAttributes(attrKeepDone.Bool(keepDone))
}

// endRelease ends the release's span with its error, and measures how long the lock was
// held.
func (p *lockProbe) endRelease(err error) {
	if p == nil {
		return
	}
	if m := p.m; m != nil && !p.runStart.IsZero() {
		m.holdDuration.Record(p.ctx, time.Since(p.runStart).Seconds(), m.only.record...)
	}
	if s := p.release; s != nil {
		if err != nil {
			s.RecordError(err)
			s.SetStatus(codes.Error, err.Error())
		}
		s.End()
	}
}

// replacing records, as an event on the tick's span, that the tick asked the run under way
// (h, on marked nodes) to stop; err is Revoke's.
func (p *lockProbe) replacing(h redlock.Holder, marked int, err error) {
	if p == nil || p.tick == nil {
		return
	}
	attrs := []attribute.KeyValue{attrHolder.String(h.Label), attrNodesOK.Int(marked)}
	if err != nil {
		attrs = append(attrs, attrCause.String(err.Error()))
	}
	p.tick.AddEvent(eventReplacing, trace.WithAttributes(attrs...))
}

// duplicate records, as an event on the tick's span, a newer holder of the tick found when a
// run that succeeded marked it done: the tick ran a second time.
func (p *lockProbe) duplicate(h redlock.Holder) {
	if p == nil || p.tick == nil {
		return
	}
	p.tick.AddEvent(eventDuplicate, trace.WithAttributes(attrHolder.String(h.Label), attrToken.Int64(int64(h.Token)), attrHolderDone.Bool(h.Done)))
}

// done measures the run's duration once Lock decided its outcome (err, Lock's result).
func (p *lockProbe) done(err error) {
	if p == nil || p.m == nil || p.runStart.IsZero() {
		return
	}
	p.m.jobDuration.Record(p.ctx, p.runEnd.Sub(p.runStart).Seconds(), p.m.outcome(Outcome(err)).record...)
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
