package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/buildinfo"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/nodes"
	"github.com/cronlock/cronlock/middleware"
)

var (
	otelLogOnce sync.Once
	otelLogger  atomic.Pointer[slog.Logger]
)

// logOTelTo sends OpenTelemetry's errors (an export that failed, …) to l at warn level (nil:
// discard them), instead of its own line on stderr.
func logOTelTo(l *slog.Logger) {
	otelLogger.Store(l)
	otelLogOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			if l := otelLogger.Load(); l != nil {
				l.Warn("opentelemetry", "err", err)
			}
		}))
	})
}

// telemetry is the daemon's OpenTelemetry: metrics read by a Prometheus exporter and served
// on /metrics, without the otel_scope_* labels, beside the Go runtime's and the process's
// (go_*, process_*) and cronlock_build_info; and, when tracing.otlp_endpoint is set, spans
// exported over OTLP/HTTP.
type telemetry struct {
	meters  *sdkmetric.MeterProvider
	metrics http.Handler
	tracers *sdktrace.TracerProvider // nil: tracing off
}

// newSpanExporter returns the exporter of the daemon's spans to tracing.otlp_endpoint over
// OTLP/HTTP, or nil when it is not set: an endpoint without a path is a base URL, as in
// OTEL_EXPORTER_OTLP_ENDPOINT, and /v1/traces is appended. It connects to nothing: spans are
// sent once a tracer provider batches them. Its errors are the tracing settings' (the
// config's and the OTEL_EXPORTER_OTLP_* variables').
func newSpanExporter(cfg *config.Config) (sdktrace.SpanExporter, error) {
	ep := cfg.Tracing.OTLPEndpoint
	if ep == "" {
		return nil, nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return nil, fmt.Errorf("%s: tracing.otlp_endpoint: %w", cfg.File, err)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces" // a base URL, as in OTEL_EXPORTER_OTLP_ENDPOINT
	}
	spans, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("%s: tracing.otlp_endpoint: %w", cfg.File, err)
	}
	return spans, nil
}

// newTelemetry returns the daemon's telemetry, its spans exported by spans (nil: tracing off).
// It takes spans over: shutdown stops it, and so does newTelemetry when it fails.
func newTelemetry(cfg *config.Config, spans sdktrace.SpanExporter) (t *telemetry, err error) {
	defer func() {
		if err != nil && spans != nil {
			_ = spans.Shutdown(context.Background())
		}
	}()
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	res := resource.NewSchemaless(semconv.ServiceName(cfg.Tracing.ServiceName))
	t = &telemetry{
		meters:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res)),
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}
	if spans != nil {
		t.tracers = sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res))
	}
	return t, nil
}

// middleware returns the scheduler's outermost middleware: Trace (when tracing is on), then
// Metrics.
func (t *telemetry) middleware() []middleware.Middleware {
	ms := make([]middleware.Middleware, 0, 2)
	if t.tracers != nil {
		ms = append(ms, middleware.Trace(middleware.WithTracerProvider(t.tracers)))
	}
	return append(ms, middleware.Metrics(middleware.WithMeterProvider(t.meters)))
}

// meterScope is the scope of the daemon's own instruments.
const meterScope = "github.com/cronlock/cronlock/cmd/cronlock"

// registerReadiness reports /readyz's verdict at each collection as cronlock.ready
// (Prometheus: cronlock_ready): 1 while a quorum of the nodes answers and is out of
// quarantine, 0 when not, or when the daemon is stopping.
func (t *telemetry) registerReadiness(r *nodes.Readiness) error {
	_, err := t.meters.Meter(meterScope).Int64ObservableGauge("cronlock.ready",
		metric.WithDescription("1 while a quorum of the lock nodes answers and is out of quarantine (/readyz), else 0."),
		metric.WithInt64Callback(func(ctx context.Context, o metric.Int64Observer) error {
			ready := int64(0)
			if r.Report(ctx, false).Ready {
				ready = 1
			}
			o.Observe(ready)
			return nil
		}))
	return err
}

// registerBuildInfo reports cronlock.build_info (Prometheus: cronlock_build_info): always 1,
// with the binary's version, commit and go_version as attributes (buildinfo.Read).
func (t *telemetry) registerBuildInfo() error {
	b := buildinfo.Read()
	attrs := metric.WithAttributes(attribute.String("version", b.Version), attribute.String("commit", b.Commit), attribute.String("go_version", b.Go))
	_, err := t.meters.Meter(meterScope).Int64ObservableGauge("cronlock.build_info",
		metric.WithDescription("1, with the version, commit and Go version of the binary as labels."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(1, attrs)
			return nil
		}))
	return err
}

// shutdown flushes the spans still buffered and stops the providers.
func (t *telemetry) shutdown(ctx context.Context) error {
	var errs []error
	if t.tracers != nil {
		errs = append(errs, t.tracers.Shutdown(ctx))
	}
	errs = append(errs, t.meters.Shutdown(ctx))
	return errors.Join(errs...)
}
