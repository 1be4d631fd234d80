package middleware_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
)

// discard is a span exporter that drops every span.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkLockTraced is a whole run on three real Redis nodes — take a new tick's lock, run
// an empty job, keep the tick as done — with Trace and Metrics recording through the SDK into
// exporters that drop everything ("sdk") and without them ("none"). The difference is what
// tracing adds to a real run; BenchmarkTraceOverhead measures it without Redis's noise.
//
//	go test -run '^$' -bench LockTraced -benchmem -count 6 ./middleware/
func BenchmarkLockTraced(b *testing.B) {
	var list []redlock.Node
	for _, s := range redistest.StartN(b, 3, redistest.Config{}) {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		b.Cleanup(func() { _ = rc.Close() })
		list = append(list, rc)
	}
	lc, err := redlock.New(list)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lc.Close() })
	if err := lc.EndQuarantine(context.Background()); err != nil {
		b.Fatal(err)
	}
	cfg := middleware.LockConfig{Prefix: "bench", KeepDone: time.Second}
	work := func(context.Context) error { return nil }
	tick := time.Now().Truncate(time.Millisecond)
	bench := func(name string, h job.Handler) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tick = tick.Add(time.Millisecond) // a new tick each time: every run takes a lock
				if err := h(job.NewContext(context.Background(), &job.Run{Job: "bench", Tick: tick, Attempt: 1, Replica: "r1"})); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	bench("none", middleware.Lock(lc, cfg)(work))

	for _, sp := range []struct {
		name string
		opt  sdktrace.TracerProviderOption
	}{
		{"sdk", sdktrace.WithBatcher(discard{})},
		{"sdk-syncer", sdktrace.WithSyncer(discard{})},
	} {
		tp := sdktrace.NewTracerProvider(sp.opt)
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		bench(sp.name, middleware.Chain(
			middleware.Trace(middleware.WithTracerProvider(tp)),
			middleware.Metrics(middleware.WithMeterProvider(mp)),
			middleware.Lock(lc, cfg),
		)(work))
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	}
}
