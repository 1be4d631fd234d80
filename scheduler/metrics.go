package scheduler

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// RegisterGauges adds per-job gauges to mp, read at each collection: the next tick and the
// start of the last successful run anywhere in the cluster, as Unix seconds
// (cronlock.job.next_tick.time, cronlock.job.last_success.time), and 1 while the job is
// paused cluster-wide (cronlock.job.paused), each with the job's name as cronlock.job.
// docs/observability.md has the "no success in two intervals" alert built on them. A
// collection costs one Status per job (bounded by 2s); a job whose nodes do not answer gets
// no value rather than a wrong one. Unregister the returned registration to stop.
func (s *Scheduler) RegisterGauges(mp metric.MeterProvider) (metric.Registration, error) {
	m := mp.Meter("github.com/cronlock/cronlock/scheduler")
	next, err1 := m.Float64ObservableGauge("cronlock.job.next_tick.time", metric.WithUnit("s"),
		metric.WithDescription("the job's next tick, Unix seconds"))
	last, err2 := m.Float64ObservableGauge("cronlock.job.last_success.time", metric.WithUnit("s"),
		metric.WithDescription("start of the job's last successful run anywhere in the cluster, Unix seconds (from the history)"))
	paused, err3 := m.Int64ObservableGauge("cronlock.job.paused",
		metric.WithDescription("1 while the job is paused cluster-wide, else 0"))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		for _, e := range s.Entries() {
			attrs := metric.WithAttributes(attribute.String("cronlock.job", e.Name)) // middleware's job attribute
			if !e.Next.IsZero() {
				o.ObserveFloat64(next, float64(e.Next.UnixMilli())/1000, attrs)
			}
			st, err := s.Status(ctx, e.Name)
			if err != nil {
				continue
			}
			if st.LastSuccess != nil {
				o.ObserveFloat64(last, float64(st.LastSuccess.Start.UnixMilli())/1000, attrs)
			}
			p := int64(0)
			if st.Paused != nil {
				p = 1
			}
			o.ObserveInt64(paused, p, attrs)
		}
		return nil
	}, next, last, paused)
}
