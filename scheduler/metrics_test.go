package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

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
	reg, err := rs[0].RegisterGauges(mp)
	require.NoError(t, err)
	var st scheduler.Status
	require.Eventually(t, func() bool { // the run is recorded after its handler returned
		st, err = rs[0].Status(ctx, "ctl")
		return err == nil && st.LastSuccess != nil
	}, 10*time.Second, 10*time.Millisecond, "no recorded success")
	g := gauges(t, reader)
	assert.Greater(t, g["cronlock.job.next_tick.time"]["ctl"], float64(st.LastSuccess.Start.Unix()))
	assert.GreaterOrEqual(t, g["cronlock.job.last_success.time"]["ctl"], float64(st.LastSuccess.Start.Unix()))
	assert.Equal(t, 0.0, g["cronlock.job.paused"]["ctl"])

	require.NoError(t, rs[0].Pause(ctx, "ctl", "for the gauge"))
	assert.Equal(t, 1.0, gauges(t, reader)["cronlock.job.paused"]["ctl"])

	require.NoError(t, reg.Unregister())
	assert.Empty(t, gauges(t, reader)["cronlock.job.paused"], "nothing observed after Unregister")
}
