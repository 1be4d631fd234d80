package scheduler_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/scheduler"
)

// gauges collects the per-job gauges once: name → job → value.
func gauges(t *testing.T, reader *sdkmetric.ManualReader) map[string]map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			values := map[string]float64{}
			switch d := m.Data.(type) {
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					job, _ := p.Attributes.Value("cronlock.job")
					values[job.AsString()] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					job, _ := p.Attributes.Value("cronlock.job")
					values[job.AsString()] = float64(p.Value)
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					job, _ := p.Attributes.Value("cronlock.job")
					values[job.AsString()] = float64(p.Value)
				}
			}
			out[m.Name] = values
		}
	}
	return out
}

// The gauges say what Status says: the next tick, the last success in the cluster, and the
// pause — for the alert on a job with no success in two intervals.
func TestRegisterGauges(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	rs := replicas(t, c, led, 1)
	ctx := ctxT(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	reg, err := schedseam.RegisterGauges(rs[0], mp)
	require.NoError(t, err)
	var st scheduler.Status
	require.Eventually(t, func() bool { // the run is recorded after its handler returned
		st, err = rs[0].Control().Status(ctx, "ctl")
		return err == nil && st.LastSuccess != nil
	}, 10*time.Second, 10*time.Millisecond, "no recorded success")
	g := gauges(t, reader)
	assert.Greater(t, g["cronlock.job.next_tick.time"]["ctl"], float64(st.LastSuccess.Start.Unix()))
	assert.GreaterOrEqual(t, g["cronlock.job.last_success.time"]["ctl"], float64(st.LastSuccess.Start.Unix()))
	assert.Equal(t, 0.0, g["cronlock.job.paused"]["ctl"])
	assert.Equal(t, map[string]float64{"": 0}, g["cronlock.jobs.unread"], "every job's state was read")

	require.NoError(t, rs[0].Control().Pause(ctx, "ctl", "for the gauge"))
	assert.Equal(t, 1.0, gauges(t, reader)["cronlock.job.paused"]["ctl"])

	require.NoError(t, c.Servers[0].Kill()) // a quorum of the nodes is gone: nothing to read
	require.NoError(t, c.Servers[1].Kill())
	g = gauges(t, reader)
	assert.Equal(t, map[string]float64{"": 1}, g["cronlock.jobs.unread"], "the job is counted unread")
	assert.Empty(t, g["cronlock.job.paused"], "no value rather than a wrong one")
	assert.Contains(t, g["cronlock.job.next_tick.time"], "ctl", "the schedule's gauges need no node")

	require.NoError(t, reg.Unregister())
	assert.Empty(t, gauges(t, reader)["cronlock.job.paused"], "nothing observed after Unregister")
}

// The instruments the alert rules read: the interval, the failures in a row since the last
// success (reset by a success), and the ticks missed when the scheduler fell behind.
func TestGaugesForAlerts(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()))
	var fail atomic.Bool
	fail.Store(true)
	require.NoError(t, s.Add(job.Job{Name: "flaky", Spec: "@every 1m", Handler: led.handler(func(context.Context) error {
		if fail.Load() {
			return errors.New("broken")
		}
		return nil
	})}))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	_, err := schedseam.RegisterGauges(s, mp)
	require.NoError(t, err)
	g := gauges(t, reader)
	assert.Equal(t, 60.0, g["cronlock.job.interval"]["flaky"], "before the first tick: from the next tick to the one after")
	assert.Equal(t, 0.0, g["cronlock.job.consecutive_failures"]["flaky"])
	assert.Equal(t, 0.0, g["cronlock.job.ticks.missed"]["flaky"])
	require.NoError(t, s.Start())

	// failuresAre waits until the history has n failures in a row (it is written after the
	// handler returned), then checks the gauge says so.
	failuresAre := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			st, err := s.Control().Status(ctxT(t), "flaky")
			return err == nil && st.Failures == n
		}, 10*time.Second, 10*time.Millisecond, "never %d failures in a row", n)
		assert.Equal(t, float64(n), gauges(t, reader)["cronlock.job.consecutive_failures"]["flaky"])
	}
	for n := 1; n <= 2; n++ {
		tick := advance(t, clock, 1)
		led.waitOutcome(t, "failed", func(o tickOutcome) bool { return o.Tick.Equal(tick) && o.Outcome == outcome.Failed })
		failuresAre(n)
	}
	assert.Equal(t, 60.0, gauges(t, reader)["cronlock.job.interval"]["flaky"], "from the last tick to the next")

	// The process was stopped for 5 minutes: the newest due tick runs, 4 are missed.
	require.NoError(t, clock.BlockUntil(ctxT(t), 1))
	d, _ := clock.NextDeadline()
	fail.Store(false)
	clock.Set(d.Add(4 * time.Minute))
	led.waitOutcome(t, "ran", func(o tickOutcome) bool { return o.Outcome == outcome.Ran })
	failuresAre(0)
	g = gauges(t, reader)
	assert.Equal(t, 4.0, g["cronlock.job.ticks.missed"]["flaky"])
	assert.Contains(t, g["cronlock.job.last_success.time"], "flaky")
}
