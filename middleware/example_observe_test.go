package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
)

// Trace and Metrics go outermost, as scheduler.WithMiddleware puts them; the SDK (here an
// in-memory recorder and a manual reader) is the program's. With Lock inside, each tick span
// also gets its attempts, run and release as children.
func ExampleTrace() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()

	h := middleware.Chain(
		middleware.Trace(middleware.WithTracerProvider(tp)),
		middleware.Metrics(middleware.WithMeterProvider(mp)),
	)(func(context.Context) error { return errors.New("upstream answered 503") })
	tick := time.Date(2025, 1, 1, 9, 30, 0, 0, time.UTC)
	_ = h(job.NewContext(context.Background(), &job.Run{Job: "invoices", Tick: tick, Attempt: 1, Replica: "worker-1"}))

	s := spans.Ended()[0]
	fmt.Println(s.Name(), s.Status().Code, s.Status().Description)
	for _, kv := range s.Attributes() {
		fmt.Printf("  %s=%s\n", kv.Key, kv.Value.String())
	}
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "cronlock.job.runs" {
			p := m.Data.(metricdata.Sum[int64]).DataPoints[0]
			outcome, _ := p.Attributes.Value("cronlock.outcome")
			fmt.Println(m.Name, outcome.AsString(), p.Value)
		}
	}
	// Output:
	// cronlock.tick Error upstream answered 503
	//   cronlock.job=invoices
	//   cronlock.tick=1735723800000
	//   cronlock.replica=worker-1
	//   cronlock.outcome=failed
	// cronlock.job.runs failed 1
}
