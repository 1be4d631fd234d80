package middleware

// The cost of tracing and metrics per run, without Redis: Trace and Metrics around a stand-in
// for Lock that makes exactly the probe calls Lock makes for a run that takes the tick at the
// first attempt, renews its lease once and keeps the tick as done. "none" is the same chain
// without Trace and Metrics (the probe is then nil); "sdk" records through the OpenTelemetry
// SDK into exporters that drop everything (a batch span processor, and a metric reader that
// is never collected). The difference is the overhead of the instrumentation alone.
//
//	go test -run '^$' -bench TraceOverhead -benchmem -count 6 ./middleware/

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

// discard is a span exporter that drops every span.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

var sink any // keeps what Lock would pass to redlock from being optimized away

// probedLock stands in for Lock: the probe's calls of one run, with the options Lock builds,
// and a number of lease renewals.
func probedLock(renewals int, next job.Handler) job.Handler {
	return func(ctx context.Context) error {
		run, _ := job.RunFrom(ctx)
		p := newLockProbe(ctx)
		if p != nil {
			p.tickKey = "{cronlock:bench}:tick:0"
			if md := p.metadata(); md != "" {
				sink = redlock.Metadata(md)
			}
		}
		sink = lockseam.OnAttempt(func(a lockseam.Attempt) { p.attempt(a) })
		p.beginAttempt()
		p.attempt(lockseam.Attempt{Number: 1, OK: 3, Quorum: 2, Elapsed: 300 * time.Microsecond, Validity: 29 * time.Second, Token: 1 << 50})
		r := *run
		r.FencingToken = 1 << 50
		rctx := p.startRun(ctx, &r)
		if p != nil {
			sink = lockseam.OnRenew(func(r lockseam.Renewal) { p.renewal(r) })
		}
		for i := range renewals {
			p.renewal(lockseam.Renewal{Number: i + 1, Validity: 29 * time.Second})
		}
		herr := next(job.NewContext(rctx, &r))
		p.endRun(herr, false, nil, time.Time{})
		p.startRelease(true)
		p.endRelease(nil)
		p.done(herr)
		return herr
	}
}

// probed returns probedLock as a Middleware.
func probed(renewals int) Middleware {
	return func(next job.Handler) job.Handler { return probedLock(renewals, next) }
}

func BenchmarkTraceOverhead(b *testing.B) {
	work := func(context.Context) error { return nil }
	ctx := job.NewContext(context.Background(), &job.Run{Job: "bench", Tick: time.UnixMilli(1_700_000_000_000), Attempt: 1, Replica: "replica-1"})
	bench := func(name string, renewals int, tpo sdktrace.TracerProviderOption) {
		b.Run(name, func(b *testing.B) {
			chain := []Middleware{probed(renewals)}
			if tpo != nil {
				tp := sdktrace.NewTracerProvider(tpo)
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer func() {
					_ = tp.Shutdown(context.Background())
					_ = mp.Shutdown(context.Background())
				}()
				chain = []Middleware{Trace(WithTracerProvider(tp)), Metrics(WithMeterProvider(mp)), probed(renewals)}
			}
			h := Chain(chain...)(work)
			b.ReportAllocs()
			for b.Loop() {
				_ = h(ctx)
			}
		})
	}
	// A run shorter than the renewal interval (10s by default): no renewal.
	bench("none", 0, nil)
	bench("batch", 0, sdktrace.WithBatcher(discard{}))
	bench("syncer", 0, sdktrace.WithSyncer(discard{}))
	// The cost of each renewal comes on top: compare with one.
	bench("none-renewal", 1, nil)
	bench("batch-renewal", 1, sdktrace.WithBatcher(discard{}))
}
