package middleware

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
)

// MetricsOption configures Metrics.
type MetricsOption func(*metricsConfig)

type metricsConfig struct {
	mp metric.MeterProvider
}

// WithMeterProvider sets where Metrics' instruments are created. Default:
// otel.GetMeterProvider() at the time Metrics is called (the global provider, which forwards
// to one set later with otel.SetMeterProvider). A nil provider means the default.
func WithMeterProvider(mp metric.MeterProvider) MetricsOption {
	return func(c *metricsConfig) { c.mp = mp }
}

// Metrics records each tick on this replica, and what Lock does for it, with OpenTelemetry
// instruments:
//
//   - cronlock.job.runs (counter): ticks by job and outcome (Outcome);
//   - cronlock.job.duration (histogram, s): how long the handler ran, by job and outcome;
//   - cronlock.job.timeouts (counter): runs whose context was cut short, by job and cause
//     ("lease": the lease was lost; "timeout": job.Options.Timeout passed);
//   - cronlock.lock.acquire.duration (histogram, s): each acquire attempt, by job and result
//     ("acquired", "held", "done", "overlap", "quorum_unavailable", "error");
//   - cronlock.lock.acquire.failures (counter): failed attempts, by job and reason (the
//     results other than "acquired");
//   - cronlock.lock.hold.duration (histogram, s): from taking the tick's lock to releasing it;
//   - cronlock.lease.renewal.failures (counter): failed renewals, by job and reason
//     ("lock_lost", "quorum_unavailable", "error").
//
// Put it outside Lock (scheduler.WithMiddleware(middleware.Metrics())): it counts the tick's
// final outcome, and gives Lock, through the context, the instruments for the rest. Measurement
// attributes are cronlock.job plus one of cronlock.outcome, cronlock.lock.result,
// cronlock.reason or cronlock.cause; docs/observability.md has the details. Errors creating
// the instruments go to otel.Handle; the instruments then do nothing.
func Metrics(opts ...MetricsOption) Middleware {
	var cfg metricsConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	ins := newInstruments(cfg.mp.Meter(scope))
	return func(next job.Handler) job.Handler {
		var last atomic.Pointer[jobMetrics] // a handler usually serves one job
		return func(ctx context.Context) error {
			run, ok := job.RunFrom(ctx)
			if !ok {
				return next(ctx)
			}
			jm := last.Load()
			if jm == nil || jm.job != run.Job {
				jm = ins.forJob(run.Job)
				last.Store(jm)
			}
			err := next(context.WithValue(ctx, metricsKey{}, jm))
			ins.runs.Add(ctx, 1, jm.outcome(Outcome(err)).add...)
			return err
		}
	}
}

// ZeroRuns makes the cronlock.job.runs series of each of the jobs, one per outcome, exist at 0
// on mp (nil: otel.GetMeterProvider()), as Metrics on the same provider counts them: a scrape
// shows every job from the start, before its first tick, and rate() and increase() see a
// job's first run. Call it when a job is added; calling it again for a job adds nothing.
func ZeroRuns(mp metric.MeterProvider, jobs ...string) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	ins := newInstruments(mp.Meter(scope)) // the provider's instruments of that name, not new ones
	for _, name := range jobs {
		for _, o := range ins.forJob(name).outcomes {
			ins.runs.Add(context.Background(), 0, o.add...)
		}
	}
}

// metricsKey carries a *jobMetrics in the context given to the chain below Metrics.
type metricsKey struct{}

// instruments are the instruments of one Metrics middleware, with the measurement options
// of each job it saw.
type instruments struct {
	runs            metric.Int64Counter
	jobDuration     metric.Float64Histogram
	timeouts        metric.Int64Counter
	acquireDuration metric.Float64Histogram
	acquireFailures metric.Int64Counter
	holdDuration    metric.Float64Histogram
	renewalFailures metric.Int64Counter

	mu   sync.Mutex
	jobs map[string]*jobMetrics
}

// Histogram buckets, in seconds: lock attempts take a round trip or a few, jobs take
// anything from milliseconds to an hour.
var (
	acquireBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	jobBuckets     = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
)

func newInstruments(m metric.Meter) *instruments {
	var errs []error
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	ins := &instruments{
		runs:            counter("cronlock.job.runs", "Ticks handled by this replica, by outcome.", "{run}"),
		jobDuration:     histogram("cronlock.job.duration", "How long job handlers ran.", jobBuckets),
		timeouts:        counter("cronlock.job.timeouts", "Runs whose context was cut short: the lease was lost, or the job's timeout passed.", "{run}"),
		acquireDuration: histogram("cronlock.lock.acquire.duration", "Duration of each attempt to take a tick's lock.", acquireBuckets),
		acquireFailures: counter("cronlock.lock.acquire.failures", "Attempts to take a tick's lock that failed, by reason.", "{attempt}"),
		holdDuration:    histogram("cronlock.lock.hold.duration", "How long tick locks were held, from acquisition to release.", jobBuckets),
		renewalFailures: counter("cronlock.lease.renewal.failures", "Lease renewals that failed, by reason.", "{renewal}"),
		jobs:            map[string]*jobMetrics{},
	}
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err)
	}
	return ins
}

// measureOpts are the options of one attribute set, ready for Add and Record: made once, they
// cost no allocation per measurement.
type measureOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func newMeasureOpts(attrs ...attribute.KeyValue) measureOpts {
	o := metric.WithAttributeSet(attribute.NewSet(attrs...))
	return measureOpts{add: []metric.AddOption{o}, record: []metric.RecordOption{o}}
}

// jobMetrics holds the instruments and the measurement options of one job.
type jobMetrics struct {
	*instruments
	job      string
	outcomes map[string]measureOpts // by Outcome
	results  map[string]measureOpts // by attempt result (cronlock.lock.result)
	reasons  map[string]measureOpts // by failure reason (cronlock.reason)
	causes   map[string]measureOpts // by timeout cause (cronlock.cause)
	only     measureOpts            // the job alone
}

func (ins *instruments) forJob(name string) *jobMetrics {
	ins.mu.Lock()
	defer ins.mu.Unlock()
	if jm := ins.jobs[name]; jm != nil {
		return jm
	}
	jm := &jobMetrics{
		instruments: ins, job: name, only: newMeasureOpts(attrJob.String(name)),
		outcomes: map[string]measureOpts{}, results: map[string]measureOpts{},
		reasons: map[string]measureOpts{}, causes: map[string]measureOpts{},
	}
	for _, o := range outcome.All {
		jm.outcomes[o] = newMeasureOpts(attrJob.String(name), attrOutcome.String(o))
	}
	for _, r := range []string{resultAcquired, resultHeld, resultDone, resultOverlap, resultPaused, resultUnavailable, resultError} {
		jm.results[r] = newMeasureOpts(attrJob.String(name), attrLockResult.String(r))
	}
	for _, r := range []string{resultHeld, resultDone, resultOverlap, resultPaused, resultUnavailable, resultError, renewalLockLost} {
		jm.reasons[r] = newMeasureOpts(attrJob.String(name), attrReason.String(r))
	}
	for _, c := range []string{causeLease, causeTimeout, causeReplaced} {
		jm.causes[c] = newMeasureOpts(attrJob.String(name), attrCause.String(c))
	}
	ins.jobs[name] = jm
	return jm
}

// lookup returns the options for value from m, or new ones for a value not known in advance.
func (jm *jobMetrics) lookup(m map[string]measureOpts, key attribute.Key, value string) measureOpts {
	if o, ok := m[value]; ok {
		return o
	}
	return newMeasureOpts(attrJob.String(jm.job), key.String(value))
}

func (jm *jobMetrics) outcome(o string) measureOpts { return jm.lookup(jm.outcomes, attrOutcome, o) }
func (jm *jobMetrics) result(r string) measureOpts  { return jm.lookup(jm.results, attrLockResult, r) }
func (jm *jobMetrics) reason(r string) measureOpts  { return jm.lookup(jm.reasons, attrReason, r) }
func (jm *jobMetrics) cause(c string) measureOpts   { return jm.lookup(jm.causes, attrCause, c) }

// metricsFrom returns the job's metrics that Metrics put in ctx, or nil.
func metricsFrom(ctx context.Context) *jobMetrics {
	jm, _ := ctx.Value(metricsKey{}).(*jobMetrics)
	return jm
}
