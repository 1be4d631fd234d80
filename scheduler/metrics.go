package scheduler

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// RegisterGauges adds per-job instruments to mp, read at each collection, each with the job's
// name as cronlock.job:
//
//   - cronlock.job.next_tick.time (gauge, s): the next tick, Unix seconds;
//   - cronlock.job.interval (gauge, s): the time from the job's last tick to its next (before
//     its first tick here: from its next tick to the one after), for "no success within k
//     intervals";
//   - cronlock.job.last_success.time (gauge, s): the start of the last successful run
//     anywhere in the cluster, Unix seconds;
//   - cronlock.job.consecutive_failures (gauge): how many ticks in a row failed or lost their
//     lease since that success, anywhere in the cluster (Status.Failures);
//   - cronlock.job.paused (gauge): 1 while the job is paused cluster-wide, else 0;
//   - cronlock.job.ticks.missed (counter): ticks this scheduler did not fire because it fell
//     behind (a paused process, a clock that jumped).
//
// and two of the cluster's replicas (Replicas), as this scheduler's last heartbeat read them,
// without the job attribute:
//
//   - cronlock.replicas (gauge), with cronlock.state alive or missing: how many replicas are
//     alive, how many missing;
//   - cronlock.replicas.config_differs (gauge): how many alive replicas' configuration differs
//     (Replica.ConfigDiffers).
//
// Neither is reported before the first heartbeat, nor while the heartbeats fail.
//
// docs/observability.md has the alert rules built on them. A collection costs one Status per
// job (bounded by 2s); a job whose nodes do not answer gets no value from the lock nodes rather
// than a wrong one. Unregister the returned registration to stop.
func (s *Scheduler) RegisterGauges(mp metric.MeterProvider) (metric.Registration, error) {
	m := mp.Meter("github.com/cronlock/cronlock/scheduler")
	next, err1 := m.Float64ObservableGauge("cronlock.job.next_tick.time", metric.WithUnit("s"),
		metric.WithDescription("the job's next tick, Unix seconds"))
	interval, err2 := m.Float64ObservableGauge("cronlock.job.interval", metric.WithUnit("s"),
		metric.WithDescription("the time from the job's last tick to its next"))
	last, err3 := m.Float64ObservableGauge("cronlock.job.last_success.time", metric.WithUnit("s"),
		metric.WithDescription("start of the job's last successful run anywhere in the cluster, Unix seconds (from the history)"))
	failures, err4 := m.Int64ObservableGauge("cronlock.job.consecutive_failures", metric.WithUnit("{run}"),
		metric.WithDescription("ticks in a row that failed or lost their lease since the job's last success, anywhere in the cluster (from the history; a tick counts once whatever its attempts)"))
	paused, err5 := m.Int64ObservableGauge("cronlock.job.paused",
		metric.WithDescription("1 while the job is paused cluster-wide, else 0"))
	missed, err6 := m.Int64ObservableCounter("cronlock.job.ticks.missed", metric.WithUnit("{tick}"),
		metric.WithDescription("ticks this scheduler did not fire because it fell behind"))
	replicas, err7 := m.Int64ObservableGauge("cronlock.replicas", metric.WithUnit("{replica}"),
		metric.WithDescription("the cluster's replicas by state (alive, missing), from their heartbeats on the lock nodes"))
	differs, err8 := m.Int64ObservableGauge("cronlock.replicas.config_differs", metric.WithUnit("{replica}"),
		metric.WithDescription("alive replicas whose configuration differs from the majority's"))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8); err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if alive, missing, drift, ok := s.replicaCounts(); ok {
			o.ObserveInt64(replicas, int64(alive), metric.WithAttributes(attribute.String("cronlock.state", "alive")))
			o.ObserveInt64(replicas, int64(missing), metric.WithAttributes(attribute.String("cronlock.state", "missing")))
			o.ObserveInt64(differs, int64(drift))
		}
		for _, e := range s.timings() {
			attrs := metric.WithAttributes(attribute.String("cronlock.job", e.name)) // middleware's job attribute
			if !e.next.IsZero() {
				o.ObserveFloat64(next, float64(e.next.UnixMilli())/1000, attrs)
			}
			if e.interval > 0 {
				o.ObserveFloat64(interval, e.interval.Seconds(), attrs)
			}
			o.ObserveInt64(missed, e.missed, attrs)
			st, err := s.Status(ctx, e.name)
			if err != nil {
				continue
			}
			if st.LastSuccess != nil {
				o.ObserveFloat64(last, float64(st.LastSuccess.Start.UnixMilli())/1000, attrs)
			}
			o.ObserveInt64(failures, int64(st.Failures), attrs)
			p := int64(0)
			if st.Paused != nil {
				p = 1
			}
			o.ObserveInt64(paused, p, attrs)
		}
		return nil
	}, next, interval, last, failures, paused, missed, replicas, differs)
}

// replicaCounts counts the replicas that the last heartbeat read, alive and missing now, and
// the alive ones whose configuration differs; ok is false when no heartbeat succeeded within
// this replica's own missing bound.
func (s *Scheduler) replicaCounts() (alive, missing, drift int, ok bool) {
	s.mu.Lock()
	seen, at := s.seen, s.seenAt
	s.mu.Unlock()
	now := s.cfg.clock.Now()
	if at.IsZero() || now.Sub(at) > missedBeats*s.cfg.heartbeat+s.cfg.maxSkew {
		return 0, 0, 0, false
	}
	for _, r := range seen {
		switch {
		case now.Sub(r.LastSeen) > r.MissingAfter:
			missing++
		case r.ConfigDiffers:
			alive++
			drift++
		default:
			alive++
		}
	}
	return alive, missing, drift, true
}

// timing is what RegisterGauges reports of a job's schedule on this scheduler.
type timing struct {
	name     string
	next     time.Time     // zero: no more ticks
	interval time.Duration // from the last tick to the next; 0 when unknown
	missed   int64
}

// timings returns the timing of every registered job, sorted by name (as Entries).
func (s *Scheduler) timings() []timing {
	entries := s.Entries()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]timing, 0, len(entries))
	for _, en := range entries {
		e := s.entries[en.Name]
		if e == nil { // removed since Entries
			continue
		}
		t := timing{name: en.Name, next: en.Next, missed: e.missed}
		switch {
		case en.Next.IsZero():
		case !en.Prev.IsZero():
			t.interval = en.Next.Sub(en.Prev)
		default:
			if after := e.sched.Next(en.Next); !after.IsZero() {
				t.interval = after.Sub(en.Next)
			}
		}
		out = append(out, t)
	}
	return out
}
