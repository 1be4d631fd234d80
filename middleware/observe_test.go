package middleware_test

// Trace and Metrics around Lock, on real Redis nodes, with the SDK's span recorder and a
// manual metric reader: every outcome of a tick, as spans, links, events and measurements.

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
)

// telemetry is an SDK tracer provider that records every span, and a meter provider read on
// demand; both are shut down when the test ends (the SDK starts goroutines).
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry(t *testing.T) *telemetry {
	tm := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tm.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tm.spans))
	tm.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader))
	t.Cleanup(func() {
		assert.NoError(t, tm.tp.Shutdown(context.Background()))
		assert.NoError(t, tm.mp.Shutdown(context.Background()))
	})
	return tm
}

// wrap puts Trace and Metrics (outermost, as scheduler.WithMiddleware does) around ms.
func (tm *telemetry) wrap(ms ...middleware.Middleware) middleware.Middleware {
	return middleware.Chain(append([]middleware.Middleware{
		middleware.Trace(middleware.WithTracerProvider(tm.tp)),
		middleware.Metrics(middleware.WithMeterProvider(tm.mp)),
	}, ms...)...)
}

// lockClient returns a redlock client over ns (through its proxies if it has them), with a
// node timeout of 100ms unless opts say otherwise. The nodes' quarantine is ended by a client
// of its own with a generous timeout: a freshly started node can take longer than a short
// test timeout to answer its first request.
func lockClient(t *testing.T, ns *nodes, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	var list []redlock.Node
	for i, s := range ns.Servers {
		addr := s.Addr()
		if ns.Proxies != nil {
			addr = ns.Proxies[i].Addr()
		}
		rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = rc.Close() })
		list = append(list, rc)
	}
	setup, err := redlock.New(list, redlock.WithNodeTimeout(5*time.Second))
	require.NoError(t, err)
	require.NoError(t, setup.EndQuarantine(context.Background()))
	require.NoError(t, setup.Close())
	lc, err := redlock.New(list, append([]redlock.Option{redlock.WithNodeTimeout(100 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Close() })
	return lc
}

// named returns the ended spans called name, in the order they ended.
func (tm *telemetry) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// children returns the ended spans whose parent is parent, called name, by start time.
func (tm *telemetry) children(parent sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tm.named(name) {
		if s.Parent().SpanID() == parent.SpanContext().SpanID() {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return out
}

// tickOf returns the cronlock.tick span of replica.
func (tm *telemetry) tickOf(t *testing.T, replica string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range tm.named("cronlock.tick") {
		if attr(s.Attributes(), "cronlock.replica").AsString() == replica {
			return s
		}
	}
	require.Failf(t, "no tick span", "replica %s", replica)
	return nil
}

func attr(kvs []attribute.KeyValue, key string) attribute.Value {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func events(s sdktrace.ReadOnlySpan, name string) []sdktrace.Event {
	var out []sdktrace.Event
	for _, e := range s.Events() {
		if e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// points returns, for the instrument called name, each data point's count (histograms) or
// value (counters), keyed by the point's attribute other than cronlock.job ("" if none).
func (tm *telemetry) points(t *testing.T, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tm.reader.Collect(context.Background(), &rm))
	out := map[string]int64{}
	key := func(set attribute.Set) string {
		for _, kv := range set.ToSlice() {
			if kv.Key != "cronlock.job" {
				return kv.Value.AsString()
			}
		}
		return ""
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(p.Attributes)] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(p.Attributes)] += int64(p.Count)
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return out
}

// One replica runs the tick while a second finds it held and a third finds it done: one span
// per replica with its outcome, the skips linked to the run's tick span, the run's children
// (attempt, run, release), a renewal event, and the measurements of each.
func TestTraceRanHeldDone(t *testing.T) {
	ns := startNodes(t, 3, false)
	tm := newTelemetry(t)
	cfg := middleware.LockConfig{Prefix: "obs", TTL: 600 * time.Millisecond}
	inside, release := make(chan struct{}), make(chan struct{})
	var (
		userSpan trace.SpanContext
		wg       sync.WaitGroup
		errs     = map[string]error{}
		mu       sync.Mutex
	)
	clients := map[string]*redlock.Client{"r1": lockClient(t, ns), "r2": lockClient(t, ns), "r3": lockClient(t, ns)}
	handle := func(replica string, h job.Handler) {
		err := tm.wrap(middleware.Lock(clients[replica], cfg))(h)(runAs(replica, "report", time.Time{}))
		mu.Lock()
		errs[replica] = err
		mu.Unlock()
	}
	wg.Go(func() {
		handle("r1", func(ctx context.Context) error {
			_, span := tm.tp.Tracer("user").Start(ctx, "user work")
			userSpan = span.SpanContext()
			span.End()
			// Hold the tick past two renewals: the lease's deadline moves forward with each, as
			// soon as the lock is extended, before the renewal is reported; the first one's
			// event is on the span once the second moved the deadline.
			deadline, _ := ctx.Deadline()
			close(inside)
			<-release
			for range 2 {
				last := deadline
				assert.Eventually(t, func() bool { deadline, _ = ctx.Deadline(); return deadline.After(last) }, 10*time.Second, 5*time.Millisecond)
			}
			return nil
		})
	})
	<-inside
	handle("r2", func(context.Context) error { t.Error("r2 ran a held tick"); return nil })
	close(release)
	wg.Wait()
	handle("r3", func(context.Context) error { t.Error("r3 ran a done tick"); return nil })
	require.NoError(t, errs["r1"])
	require.Equal(t, outcome.SkippedHeld, middleware.Outcome(errs["r2"]))
	require.Equal(t, outcome.SkippedDone, middleware.Outcome(errs["r3"]))

	// The run.
	ran := tm.tickOf(t, "r1")
	assert.Equal(t, "ran", attr(ran.Attributes(), "cronlock.outcome").AsString())
	assert.Equal(t, "report", attr(ran.Attributes(), "cronlock.job").AsString())
	assert.Equal(t, tick.UnixMilli(), attr(ran.Attributes(), "cronlock.tick").AsInt64())
	assert.Equal(t, codes.Unset, ran.Status().Code)
	assert.False(t, ran.Parent().IsValid(), "a tick span is a root")
	attempts := tm.children(ran, "cronlock.lock.acquire")
	require.Len(t, attempts, 1)
	a := attempts[0]
	assert.Equal(t, "acquired", attr(a.Attributes(), "cronlock.lock.result").AsString())
	assert.EqualValues(t, 1, attr(a.Attributes(), "cronlock.lock.attempt").AsInt64())
	assert.EqualValues(t, 2, attr(a.Attributes(), "cronlock.lock.quorum").AsInt64())
	assert.GreaterOrEqual(t, attr(a.Attributes(), "cronlock.lock.nodes.ok").AsInt64(), int64(2))
	assert.Positive(t, attr(a.Attributes(), "cronlock.lock.validity_ms").AsFloat64())
	assert.Positive(t, attr(a.Attributes(), "cronlock.lock.elapsed_ms").AsFloat64())
	token := attr(a.Attributes(), "cronlock.fencing_token").AsInt64()
	assert.Positive(t, token)
	assert.False(t, a.StartTime().Before(ran.StartTime()))
	assert.False(t, a.EndTime().After(ran.EndTime()))

	runs := tm.children(ran, "cronlock.job.run")
	require.Len(t, runs, 1)
	run := runs[0]
	assert.Equal(t, token, attr(run.Attributes(), "cronlock.fencing_token").AsInt64())
	assert.Equal(t, codes.Unset, run.Status().Code)
	assert.Equal(t, run.SpanContext().SpanID(), spanParentOf(t, tm, userSpan), "the job's own spans are children of the run's")
	renewed := events(run, "cronlock.lease.renewed")
	require.NotEmpty(t, renewed)
	assert.Positive(t, attr(renewed[0].Attributes, "cronlock.lock.validity_ms").AsFloat64())
	assert.EqualValues(t, 1, attr(renewed[0].Attributes, "cronlock.lease.renewal").AsInt64())
	assert.Empty(t, events(run, "cronlock.lease.lost"))
	assert.False(t, run.StartTime().Before(a.EndTime()))

	rel := tm.children(ran, "cronlock.lock.release")
	require.Len(t, rel, 1)
	assert.True(t, attr(rel[0].Attributes(), "cronlock.lock.keep_done").AsBool())
	assert.Equal(t, codes.Unset, rel[0].Status().Code)
	assert.False(t, rel[0].StartTime().Before(run.EndTime()))

	// The skips: linked to the run's tick span, with the holder, no run of their own.
	skipAttempts := map[string]int64{} // attempts by result
	for replica, result := range map[string]string{"r2": "held", "r3": "done"} {
		s := tm.tickOf(t, replica)
		assert.Equal(t, "skipped_"+result, attr(s.Attributes(), "cronlock.outcome").AsString())
		assert.Equal(t, "r1", attr(s.Attributes(), "cronlock.holder").AsString())
		assert.Equal(t, codes.Unset, s.Status().Code, "a skip is not an error")
		require.Len(t, s.Links(), 1, replica)
		assert.Equal(t, ran.SpanContext().TraceID(), s.Links()[0].SpanContext.TraceID())
		assert.Equal(t, ran.SpanContext().SpanID(), s.Links()[0].SpanContext.SpanID())
		assert.NotEqual(t, ran.SpanContext().TraceID(), s.SpanContext().TraceID(), "each replica's tick is a trace of its own")
		// A refusal decided before every node answered may be tried again (it could be a
		// split vote): one attempt or more, the last one final. Before it, r3 may still find
		// the tick held: Release returns once a quorum and the primary answered, and the
		// third node may apply it a moment later.
		att := tm.children(s, "cronlock.lock.acquire")
		require.NotEmpty(t, att, replica)
		for i, a := range att {
			got := attr(a.Attributes(), "cronlock.lock.result").AsString()
			if i == len(att)-1 {
				assert.Equal(t, result, got, replica)
			} else {
				assert.Contains(t, []string{"held", result}, got, replica)
			}
			assert.EqualValues(t, i+1, attr(a.Attributes(), "cronlock.lock.attempt").AsInt64())
			assert.Equal(t, "r1", attr(a.Attributes(), "cronlock.holder").AsString())
			assert.Equal(t, got == "done", attr(a.Attributes(), "cronlock.holder.done").AsBool())
			assert.Equal(t, codes.Unset, a.Status().Code)
			skipAttempts[got]++
		}
		assert.Empty(t, tm.children(s, "cronlock.job.run"))
		assert.Empty(t, tm.children(s, "cronlock.lock.release"))
	}

	assert.Equal(t, map[string]int64{"ran": 1, "skipped_held": 1, "skipped_done": 1}, tm.points(t, "cronlock.job.runs"))
	assert.Equal(t, map[string]int64{"acquired": 1, "held": skipAttempts["held"], "done": skipAttempts["done"]}, tm.points(t, "cronlock.lock.acquire.duration"))
	assert.Equal(t, map[string]int64{"held": skipAttempts["held"], "done": skipAttempts["done"]}, tm.points(t, "cronlock.lock.acquire.failures"))
	assert.Equal(t, map[string]int64{"": 1}, tm.points(t, "cronlock.lock.hold.duration"))
	assert.Equal(t, map[string]int64{"ran": 1}, tm.points(t, "cronlock.job.duration"))
	assert.Empty(t, tm.points(t, "cronlock.job.timeouts"))
	assert.Empty(t, tm.points(t, "cronlock.lease.renewal.failures"))
}

// spanParentOf returns the parent span id of the ended span sc.
func spanParentOf(t *testing.T, tm *telemetry, sc trace.SpanContext) trace.SpanID {
	t.Helper()
	for _, s := range tm.spans.Ended() {
		if s.SpanContext().SpanID() == sc.SpanID() {
			return s.Parent().SpanID()
		}
	}
	t.Fatalf("span %s not found", sc.SpanID())
	return trace.SpanID{}
}

// A failed run is an error on the tick and run spans; its lock is released, not kept.
func TestTraceFailed(t *testing.T) {
	ns := startNodes(t, 3, false)
	tm := newTelemetry(t)
	boom := errors.New("disk full")
	err := tm.wrap(middleware.Lock(lockClient(t, ns), middleware.LockConfig{}))(func(context.Context) error { return boom })(runAs("r1", "failing", time.Time{}))
	require.ErrorIs(t, err, boom)

	s := tm.tickOf(t, "r1")
	assert.Equal(t, "failed", attr(s.Attributes(), "cronlock.outcome").AsString())
	assert.Equal(t, codes.Error, s.Status().Code)
	assert.Equal(t, "disk full", s.Status().Description)
	require.Len(t, events(s, "exception"), 1, "RecordError")
	run := tm.children(s, "cronlock.job.run")
	require.Len(t, run, 1)
	assert.Equal(t, codes.Error, run[0].Status().Code)
	assert.Len(t, events(run[0], "exception"), 1)
	rel := tm.children(s, "cronlock.lock.release")
	require.Len(t, rel, 1)
	assert.False(t, attr(rel[0].Attributes(), "cronlock.lock.keep_done").AsBool())

	assert.Equal(t, map[string]int64{"failed": 1}, tm.points(t, "cronlock.job.runs"))
	assert.Equal(t, map[string]int64{"failed": 1}, tm.points(t, "cronlock.job.duration"))
	assert.Equal(t, map[string]int64{"": 1}, tm.points(t, "cronlock.lock.hold.duration"))
}

// With every node cut off while the job runs, the renewals fail and the lease is lost: the
// run span shows the failed renewals and the moment of the loss, the tick is lease_lost, and
// the metrics count the renewal failures and the cut-short run. The failed renewals are one
// log line, with their count.
func TestTraceLeaseLost(t *testing.T) {
	ns := startNodes(t, 3, true)
	tm := newTelemetry(t)
	logs := &records{}
	lc := lockClient(t, ns, redlock.WithNodeTimeout(20*time.Millisecond))
	lock := middleware.Lock(lc, middleware.LockConfig{TTL: 500 * time.Millisecond, Logger: slog.New(logs)})
	var cancelled time.Time
	err := tm.wrap(lock)(func(ctx context.Context) error {
		for _, p := range ns.Proxies {
			p.Blackhole(true)
		}
		<-ctx.Done()
		cancelled = time.Now()
		return context.Cause(ctx)
	})(runAs("r1", "lost", time.Time{}))
	for _, p := range ns.Proxies {
		p.Blackhole(false)
	}
	require.ErrorIs(t, err, redlock.ErrLeaseLost)

	s := tm.tickOf(t, "r1")
	assert.Equal(t, "lease_lost", attr(s.Attributes(), "cronlock.outcome").AsString())
	assert.Equal(t, codes.Error, s.Status().Code)
	run := tm.children(s, "cronlock.job.run")
	require.Len(t, run, 1)
	assert.Equal(t, codes.Error, run[0].Status().Code)
	failed := events(run[0], "cronlock.lease.renewal_failed")
	require.NotEmpty(t, failed)
	assert.Equal(t, "quorum_unavailable", attr(failed[0].Attributes, "cronlock.reason").AsString())
	assert.Contains(t, attr(failed[0].Attributes, "cronlock.cause").AsString(), "quorum unavailable")
	lost := events(run[0], "cronlock.lease.lost")
	require.Len(t, lost, 1)
	assert.Contains(t, attr(lost[0].Attributes, "cronlock.cause").AsString(), "lease lost")
	assert.False(t, lost[0].Time.After(cancelled), "the loss is dated when the validity ran out, before the job saw it")
	assert.False(t, lost[0].Time.Before(failed[0].Time))
	assert.Len(t, tm.children(s, "cronlock.lock.release"), 1)

	assert.Equal(t, map[string]int64{"lease_lost": 1}, tm.points(t, "cronlock.job.runs"))
	assert.Equal(t, map[string]int64{"lease": 1}, tm.points(t, "cronlock.job.timeouts"))
	assert.Equal(t, map[string]int64{"quorum_unavailable": int64(len(failed))}, tm.points(t, "cronlock.lease.renewal.failures"))
	assert.Equal(t, map[string]int64{"lease_lost": 1}, tm.points(t, "cronlock.job.duration"))

	renewalLines := logs.matching("cronlock: lease renewals failed")
	require.Len(t, renewalLines, 1, "one line for the stretch of failed renewals")
	assert.Equal(t, slog.LevelWarn, renewalLines[0].Level)
	assert.EqualValues(t, len(failed), recordAttr(renewalLines[0], "failures"))
	assert.Equal(t, false, recordAttr(renewalLines[0], "recovered"))
}

// With every node killed, every attempt fails until the tick's window closes: one
// error span per attempt, numbered, and a quorum_unavailable tick.
func TestTraceQuorumUnavailable(t *testing.T) {
	ns := startNodes(t, 3, false)
	tm := newTelemetry(t)
	lc := lockClient(t, ns, redlock.WithNodeTimeout(20*time.Millisecond))
	// Every node down: with one left, an attempt that took it is released in the background,
	// and under load the next attempt can reach it first and be refused by that leftover
	// ("held", seen beside a fault-suite run) instead of failing for want of a quorum.
	for _, s := range ns.Servers {
		require.NoError(t, s.Kill())
	}
	ctx := job.NewContext(context.Background(), &job.Run{Job: "q", Tick: tick, Replica: "r1", Attempt: 1, Deadline: time.Now().Add(300 * time.Millisecond)})
	err := tm.wrap(middleware.Lock(lc, middleware.LockConfig{TTL: time.Second}))(func(context.Context) error {
		t.Error("ran without a quorum")
		return nil
	})(ctx)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)

	s := tm.tickOf(t, "r1")
	assert.Equal(t, "quorum_unavailable", attr(s.Attributes(), "cronlock.outcome").AsString())
	assert.Equal(t, codes.Error, s.Status().Code)
	attempts := tm.children(s, "cronlock.lock.acquire")
	require.NotEmpty(t, attempts)
	for i, a := range attempts {
		assert.EqualValues(t, i+1, attr(a.Attributes(), "cronlock.lock.attempt").AsInt64())
		assert.Equal(t, "quorum_unavailable", attr(a.Attributes(), "cronlock.lock.result").AsString())
		assert.GreaterOrEqual(t, attr(a.Attributes(), "cronlock.lock.nodes.errored").AsInt64(), int64(2))
		assert.Equal(t, codes.Error, a.Status().Code)
		assert.Len(t, events(a, "exception"), 1)
	}
	assert.Empty(t, tm.children(s, "cronlock.job.run"))
	assert.Equal(t, map[string]int64{"quorum_unavailable": 1}, tm.points(t, "cronlock.job.runs"))
	assert.Equal(t, map[string]int64{"quorum_unavailable": int64(len(attempts))}, tm.points(t, "cronlock.lock.acquire.failures"))
	assert.Empty(t, tm.points(t, "cronlock.lock.hold.duration"))
}

// The remaining outcomes: a tick skipped because its window closed makes no attempt; a tick
// skipped because the previous run still runs links to that run; a timeout counts as a
// cut-short run.
func TestTraceOtherOutcomes(t *testing.T) {
	ns := startNodes(t, 3, false)
	tm := newTelemetry(t)
	lc := lockClient(t, ns)

	ctx := job.NewContext(context.Background(), &job.Run{Job: "late", Tick: tick, Replica: "r1", Deadline: time.Now().Add(-time.Second)})
	err := tm.wrap(middleware.Lock(lc, middleware.LockConfig{}))(func(context.Context) error { return nil })(ctx)
	require.Equal(t, outcome.SkippedLate, middleware.Outcome(err))
	s := tm.tickOf(t, "r1")
	assert.Equal(t, "skipped_late", attr(s.Attributes(), "cronlock.outcome").AsString())
	assert.Empty(t, tm.children(s, "cronlock.lock.acquire"))
	assert.Empty(t, s.Links())

	// Overlap: the previous tick's run holds the job's run key.
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- tm.wrap(middleware.Lock(lc, middleware.LockConfig{}))(func(context.Context) error {
			close(inside)
			<-release
			return nil
		})(runAs("r2", "overlap", time.Time{}))
	}()
	<-inside
	next := job.NewContext(context.Background(), &job.Run{Job: "overlap", Tick: tick.Add(time.Minute), Attempt: 1, Replica: "r3"})
	err = tm.wrap(middleware.Lock(lockClient(t, ns), middleware.LockConfig{}))(func(context.Context) error { return nil })(next)
	close(release)
	require.NoError(t, <-done)
	require.Equal(t, outcome.SkippedOverlap, middleware.Outcome(err))
	s = tm.tickOf(t, "r3")
	assert.Equal(t, "skipped_overlap", attr(s.Attributes(), "cronlock.outcome").AsString())
	require.Len(t, s.Links(), 1)
	assert.Equal(t, tm.tickOf(t, "r2").SpanContext().SpanID(), s.Links()[0].SpanContext.SpanID())

	err = tm.wrap(middleware.Lock(lc, middleware.LockConfig{}), middleware.Timeout(time.Millisecond))(func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})(runAs("r4", "slow", time.Time{}))
	require.ErrorIs(t, err, middleware.ErrTimeout)
	assert.Equal(t, "failed", attr(tm.tickOf(t, "r4").Attributes(), "cronlock.outcome").AsString())
	assert.Equal(t, map[string]int64{"timeout": 1}, tm.points(t, "cronlock.job.timeouts"))
	assert.Equal(t, map[string]int64{"ran": 1, "failed": 1, "skipped_late": 1, "skipped_overlap": 1}, tm.points(t, "cronlock.job.runs"))
}

// Metrics without Trace: measurements, no spans, and no metadata stored beside the lock.
// Trace without a recording provider: nothing recorded.
func TestMetricsWithoutTrace(t *testing.T) {
	ns := startNodes(t, 3, false)
	tm := newTelemetry(t)
	lc := lockClient(t, ns)
	h := middleware.Chain(middleware.Metrics(middleware.WithMeterProvider(tm.mp)), middleware.Lock(lc, middleware.LockConfig{}))
	require.NoError(t, h(func(context.Context) error { return nil })(runAs("r1", "m", time.Time{})))
	err := h(func(context.Context) error { return nil })(runAs("r2", "m", time.Time{}))
	_, ok := errors.AsType[*job.SkipError](err)
	require.True(t, ok)
	ae, ok := errors.AsType[*redlock.AcquireError](err)
	require.True(t, ok)
	assert.Empty(t, ae.Holder.Metadata)
	assert.Empty(t, tm.spans.Ended())
	assert.Equal(t, map[string]int64{"ran": 1, "skipped_done": 1}, tm.points(t, "cronlock.job.runs"))

	off := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(tm.spans))
	defer func() { require.NoError(t, off.Shutdown(context.Background())) }()
	h = middleware.Chain(middleware.Trace(middleware.WithTracerProvider(off)), middleware.Lock(lc, middleware.LockConfig{}))
	require.NoError(t, h(func(context.Context) error { return nil })(runAs("r1", "unsampled", time.Time{})))
	assert.Empty(t, tm.spans.Ended())
}

// ZeroRuns makes the runs series of every outcome of a job exist at 0, once however often it
// is called; Metrics on the same provider then counts on those series.
func TestZeroRuns(t *testing.T) {
	tm := newTelemetry(t)
	middleware.ZeroRuns(tm.mp, "z")
	middleware.ZeroRuns(tm.mp, "z")
	before := tm.points(t, "cronlock.job.runs")
	assert.Len(t, before, 12, "one series per outcome: %v", before)
	for outcome, n := range before {
		assert.Zero(t, n, outcome)
	}
	h := middleware.Metrics(middleware.WithMeterProvider(tm.mp))
	require.NoError(t, h(func(context.Context) error { return nil })(runAs("r1", "z", time.Time{})))
	after := tm.points(t, "cronlock.job.runs")
	assert.Len(t, after, 12)
	assert.Equal(t, int64(1), after[outcome.Ran])
	assert.Zero(t, after[outcome.Failed])
}

// A panic that no Recover turns into an error goes through Lock and Trace, which end their
// spans with an error first.
func TestTracePanic(t *testing.T) {
	ns := startNodes(t, 3, false)
	tm := newTelemetry(t)
	h := tm.wrap(middleware.Lock(lockClient(t, ns), middleware.LockConfig{}))(func(context.Context) error { panic("boom") })
	assert.PanicsWithValue(t, "boom", func() { _ = h(runAs("r1", "panics", time.Time{})) })
	s := tm.tickOf(t, "r1")
	assert.Equal(t, codes.Error, s.Status().Code)
	run := tm.children(s, "cronlock.job.run")
	require.Len(t, run, 1)
	assert.Equal(t, codes.Error, run[0].Status().Code)
	assert.Len(t, tm.children(s, "cronlock.lock.release"), 1)
}

// records is a slog.Handler that keeps every record.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// recordAttr returns the value of rec's attribute key, nil if it has none.
func recordAttr(rec slog.Record, key string) any {
	var v any
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.Any()
		}
		return v == nil
	})
	return v
}

func (r *records) matching(prefix string) []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(r.list), func(rec slog.Record) bool { return !strings.HasPrefix(rec.Message, prefix) })
}
