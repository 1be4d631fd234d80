// Command jaeger runs three replicas of a worker that trace every tick to Jaeger (or any
// OTLP/HTTP endpoint): how to wire the OpenTelemetry SDK and exporter to cronlock's Trace and
// Metrics middleware.
//
// Start a Jaeger (v2, all-in-one, memory storage; the UI on 16686, OTLP/HTTP on 4318):
//
//	docker run --rm -p 16686:16686 -p 4318:4318 jaegertracing/jaeger:latest
//
// then run the example (it starts three embedded nodes, miniredis, unless given -nodes):
//
//	go run ./examples/jaeger                     # exports to localhost:4318
//	go run ./examples/jaeger -otlp 10.0.0.5:4318 -nodes 127.0.0.1:6379,127.0.0.1:6380,127.0.0.1:6381
//
// # What Jaeger shows
//
// Open http://localhost:16686, pick the service "cronlock-example" and the operation
// "cronlock.tick", and search. Each replica's handling of each tick is a trace of its own, so
// every tick appears three times, once per replica (the tag cronlock.replica says which):
//
//   - one trace with cronlock.outcome=ran: under the root span cronlock.tick, one
//     cronlock.lock.acquire span per attempt to take the tick's lock (how many nodes said
//     yes, refused or failed, the quorum, the validity left, the fencing token), then
//     cronlock.job.run — the job's own span "send report" nests under it, and the lease's
//     renewals are logs on it — and cronlock.lock.release (keep_done=true: the tick is kept
//     as done on the nodes);
//   - two traces with cronlock.outcome=skipped_held (they asked while the run was going on)
//     or skipped_done (they asked after it ended): a cronlock.tick span with one
//     cronlock.lock.acquire child whose result is "held" or "done" and whose cronlock.holder
//     names the replica that ran it. Each of these root spans has a reference (a span link,
//     FOLLOWS_FROM in Jaeger's terms) to the cronlock.tick span of the run: in the trace view,
//     expand the span and follow the reference to jump to the run that made the skip
//     unnecessary.
//
// The "flaky" job fails every third tick: those runs show as errors (red, with the error as a
// log and in otel.status_description), and cronlock.outcome=failed; search the tag
// error=true to find them. A search on cronlock.tick=<unix ms> gathers the three traces of
// one tick.
//
// In production each replica is its own process with its own TracerProvider; here the three
// share a process, each with a provider of its own, so that they show up as three instances
// (service.instance.id) of one service.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronlock/cronlock/examples/internal/localnodes"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/scheduler"
)

func main() {
	nodes := flag.String("nodes", "", "comma-separated host:port of Redis nodes (default: 3 embedded nodes)")
	otlp := flag.String("otlp", "localhost:4318", "OTLP/HTTP endpoint (host:port) of Jaeger or a collector")
	duration := flag.Duration("duration", 10*time.Second, "how long to run")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, *nodes, *otlp, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "jaeger:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer, nodeList, otlp string, duration time.Duration) error {
	out := &syncWriter{w: w} // jobs write from their own goroutines
	addrs, cleanup, err := localnodes.Addrs(nodeList)
	if err != nil {
		return err
	}
	defer cleanup()

	var flaky atomic.Int64
	jobs := []job.Job{
		{Name: "report", Spec: "@every 2s", Handler: func(ctx context.Context) error {
			// The job's own spans are children of cronlock.job.run: use the context.
			_, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("example").Start(ctx, "send report")
			defer span.End()
			r, _ := job.RunFrom(ctx)
			span.SetAttributes(attribute.Int64("report.fencing_token", int64(r.FencingToken)))
			select {
			case <-time.After(200 * time.Millisecond): // the work
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			fmt.Fprintf(out, "%s sent the report of %s\n", r.Replica, r.Tick.Format(time.TimeOnly))
			return nil
		}},
		{Name: "flaky", Spec: "@every 1s", Handler: func(context.Context) error {
			if flaky.Add(1)%3 == 0 {
				return errors.New("upstream answered 503")
			}
			return nil
		}},
	}

	var scheds []*scheduler.Scheduler
	for i := range 3 {
		replica := fmt.Sprint("replica-", i+1)
		tp, mp, err := telemetry(ctx, otlp, replica)
		if err != nil {
			return err
		}
		// Shut the providers down last: it flushes the spans of the final ticks.
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := errors.Join(tp.Shutdown(sctx), mp.Shutdown(sctx)); err != nil {
				fmt.Fprintln(out, "telemetry shutdown:", err)
			}
		}()
		locks, closeLocks, err := localnodes.LockClient(ctx, addrs)
		if err != nil {
			return err
		}
		defer closeLocks()
		s, err := scheduler.New(locks,
			scheduler.WithReplica(replica),
			// Outermost, so that they see each tick once, with its final outcome.
			scheduler.WithMiddleware(
				middleware.Trace(middleware.WithTracerProvider(tp)),
				middleware.Metrics(middleware.WithMeterProvider(mp)),
			),
		)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if err := s.Add(j); err != nil {
				return err
			}
		}
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		if err := s.Start(); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "running 3 replicas for %v, exporting to %s\n", duration, otlp)
	select {
	case <-ctx.Done():
	case <-time.After(duration):
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range scheds {
		if err := s.Stop(stopCtx); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "done: open the Jaeger UI, service cronlock-example, operation cronlock.tick")
	return nil
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// telemetry returns the replica's tracer provider, exporting over OTLP/HTTP in batches, and
// a meter provider. The meter provider here has no reader, so its measurements go nowhere;
// in a real worker, give it one — e.g. the Prometheus exporter
// (go.opentelemetry.io/otel/exporters/prometheus) or sdkmetric.NewPeriodicReader with an
// OTLP metric exporter.
func telemetry(ctx context.Context, endpoint, replica string) (*sdktrace.TracerProvider, *sdkmetric.MeterProvider, error) {
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure())
	if err != nil {
		return nil, nil, err
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", "cronlock-example"),
		attribute.String("service.instance.id", replica),
	)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res))
	return tp, mp, nil
}
