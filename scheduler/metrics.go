package scheduler

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// registerGauges adds per-job instruments to mp, read at each collection, each with the job's
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
// one of the collection itself:
//
//   - cronlock.jobs.unread (gauge): how many jobs' cluster state (last_success.time,
//     consecutive_failures, paused) this collection could not read from the lock nodes: nodes
//     that did not answer, or the collection's bound passed. Those series are left out of
//     this collection for those jobs.
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
// job, 8 at a time, the whole collection bounded by 2s; a job whose nodes do not answer in time
// gets no value from the lock nodes rather than a wrong one. Unregister the returned
// registration to stop.
func (s *Scheduler) registerGauges(mp metric.MeterProvider) (metric.Registration, error) {
	m := mp.Meter("github.com/cronlock/cronlock/scheduler")
	g, err := newGauges(m)
	if err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		g.observe(ctx, s, o)
		return nil
	}, g.next, g.interval, g.last, g.failures, g.paused, g.missed, g.replicas, g.differs, g.unread)
}

// gauges are the instruments of registerGauges.
type gauges struct {
	next, interval, last                        metric.Float64ObservableGauge
	failures, paused, replicas, differs, unread metric.Int64ObservableGauge
	missed                                      metric.Int64ObservableCounter
}

func newGauges(m metric.Meter) (*gauges, error) {
	var g gauges
	var errs [9]error
	g.next, errs[0] = m.Float64ObservableGauge("cronlock.job.next_tick.time", metric.WithUnit("s"),
		metric.WithDescription("the job's next tick, Unix seconds"))
	g.interval, errs[1] = m.Float64ObservableGauge("cronlock.job.interval", metric.WithUnit("s"),
		metric.WithDescription("the time from the job's last tick to its next"))
	g.last, errs[2] = m.Float64ObservableGauge("cronlock.job.last_success.time", metric.WithUnit("s"),
		metric.WithDescription("start of the job's last successful run anywhere in the cluster, Unix seconds (from the history)"))
	g.failures, errs[3] = m.Int64ObservableGauge("cronlock.job.consecutive_failures", metric.WithUnit("{run}"),
		metric.WithDescription("ticks in a row that failed or lost their lease since the job's last success, anywhere in the cluster (from the history; a tick counts once whatever its attempts)"))
	g.paused, errs[4] = m.Int64ObservableGauge("cronlock.job.paused",
		metric.WithDescription("1 while the job is paused cluster-wide, else 0"))
	g.missed, errs[5] = m.Int64ObservableCounter("cronlock.job.ticks.missed", metric.WithUnit("{tick}"),
		metric.WithDescription("ticks this scheduler did not fire because it fell behind"))
	g.replicas, errs[6] = m.Int64ObservableGauge("cronlock.replicas", metric.WithUnit("{replica}"),
		metric.WithDescription("the cluster's replicas by state (alive, missing), from their heartbeats on the lock nodes"))
	g.differs, errs[7] = m.Int64ObservableGauge("cronlock.replicas.config_differs", metric.WithUnit("{replica}"),
		metric.WithDescription("alive replicas whose configuration differs from the majority's"))
	g.unread, errs[8] = m.Int64ObservableGauge("cronlock.jobs.unread", metric.WithUnit("{job}"),
		metric.WithDescription("jobs whose state this collection could not read from the lock nodes (their series are left out)"))
	return &g, errors.Join(errs[:]...)
}

// observe observes s's gauges in o, its reads of the nodes bounded by collectBound.
func (g *gauges) observe(ctx context.Context, s *Scheduler, o metric.Observer) {
	ctx, cancel := context.WithTimeout(ctx, collectBound)
	defer cancel()
	if alive, missing, drift, ok := s.replicaCounts(); ok {
		o.ObserveInt64(g.replicas, int64(alive), metric.WithAttributes(attribute.String("cronlock.state", "alive")))
		o.ObserveInt64(g.replicas, int64(missing), metric.WithAttributes(attribute.String("cronlock.state", "missing")))
		o.ObserveInt64(g.differs, int64(drift))
	}
	timings := s.timings()
	statuses := s.statuses(ctx, timings)
	var unread int64
	for i, e := range timings {
		attrs := metric.WithAttributes(attribute.String("cronlock.job", e.entry.Name)) // middleware's job attribute
		if !e.entry.Next.IsZero() {
			o.ObserveFloat64(g.next, float64(e.entry.Next.UnixMilli())/1000, attrs)
		}
		if e.interval > 0 {
			o.ObserveFloat64(g.interval, e.interval.Seconds(), attrs)
		}
		o.ObserveInt64(g.missed, e.missed, attrs)
		st := statuses[i]
		if st == nil {
			unread++
			continue
		}
		if st.LastSuccess != nil {
			o.ObserveFloat64(g.last, float64(st.LastSuccess.Start.UnixMilli())/1000, attrs)
		}
		o.ObserveInt64(g.failures, int64(st.Failures), attrs)
		p := int64(0)
		if st.Paused != nil {
			p = 1
		}
		o.ObserveInt64(g.paused, p, attrs)
	}
	o.ObserveInt64(g.unread, unread)
}

const (
	// collectBound bounds a collection's reads of the lock nodes.
	collectBound = 2 * time.Second
	// statusReaders is how many jobs' states a collection reads at once: a collection of
	// thousands of jobs is bounded by the nodes' round trips, not by one after the other.
	statusReaders = 8
)

// statuses reads the Status of the job of each of ts, statusReaders at a time, until ctx
// ends. An element is nil where the read failed or did not start before ctx ended.
func (s *Scheduler) statuses(ctx context.Context, ts []timing) []*Status {
	out := make([]*Status, len(ts))
	var next atomic.Int64 // the index of the next job to read
	var wg sync.WaitGroup
	for range min(statusReaders, len(ts)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(ts)) && ctx.Err() == nil; i = next.Add(1) - 1 {
				if st, err := s.ctl.status(ctx, ts[i].entry); err == nil {
					out[i] = &st
				}
			}
		})
	}
	wg.Wait()
	return out
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

// timing is what registerGauges reports of a job's schedule on this scheduler.
type timing struct {
	entry    Entry         // Next zero: no more ticks
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
		t := timing{entry: en, missed: e.missed}
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
