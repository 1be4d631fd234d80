package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/scheddefault"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/scheduler"
)

// waitReplicas reads ctl's replicas until cond holds, each read after the previous one
// answered, and returns them; it fails after waitLimit.
func waitReplicas(t *testing.T, ctl *scheduler.Control, what string, cond func(map[string]scheduler.Replica) bool) map[string]scheduler.Replica {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	var last map[string]scheduler.Replica
	for time.Now().Before(deadline) {
		rs, err := ctl.Replicas(ctxT(t))
		require.NoError(t, err)
		last = map[string]scheduler.Replica{}
		for _, r := range rs {
			last[r.Name] = r
		}
		if cond(last) {
			return last
		}
	}
	t.Fatalf("waited %v for %s; replicas: %+v", waitLimit, what, last)
	return nil
}

// replicaGauges collects cronlock.replicas by state, and cronlock.replicas.config_differs.
func replicaGauges(t *testing.T, reader *sdkmetric.ManualReader) (map[string]int64, int64, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	states, differs, found := map[string]int64{}, int64(-1), false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Gauge[int64])
			if !ok {
				continue
			}
			for _, p := range d.DataPoints {
				switch m.Name {
				case "cronlock.replicas":
					state, _ := p.Attributes.Value("cronlock.state")
					states[state.AsString()], found = p.Value, true
				case "cronlock.replicas.config_differs":
					differs = p.Value
				}
			}
		}
	}
	return states, differs, found
}

// Every scheduler registers on the lock nodes with a heartbeat: Replicas lists them with their
// version, start, jobs, configuration hash and runs in flight; the one whose jobs differ from
// the majority's is flagged; one that vanished without Stop shows missing once its heartbeat
// is older than its bound, and is dropped after an hour; one that stopped is removed.
func TestReplicas(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(time.Now())
	const beat = 20 * time.Millisecond
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	var rs []*scheduler.Scheduler
	for i := range 3 {
		s := newScheduler(t, c.client(t, false), scheduler.WithReplica(fmt.Sprintf("r%d", i)), scheduler.WithClock(clock),
			schedseam.WithHeartbeat(beat).(scheduler.Option), schedseam.WithVersion(fmt.Sprintf("v1.%d", i)).(scheduler.Option))
		spec := "@every 1h"
		if i == 2 {
			spec = "@every 2h" // r2's configuration differs
		}
		require.NoError(t, s.Add(job.Job{Name: "report", Spec: spec, Handler: func(ctx context.Context) error {
			running <- struct{}{}
			<-release
			return nil
		}}))
		rs = append(rs, s)
	}
	started := clock.Now()
	for _, s := range rs {
		require.NoError(t, s.Start())
	}
	ctl, err := scheduler.NewControl(c.client(t, false), scheduler.WithClock(clock))
	require.NoError(t, err)

	reader := sdkmetric.NewManualReader()
	reg, err := schedseam.RegisterGauges(rs[0], sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)
	defer func() { require.NoError(t, reg.Unregister()) }()

	got := waitReplicas(t, ctl, "three replicas, r2 differing", func(m map[string]scheduler.Replica) bool {
		return len(m) == 3 && m["r0"].Alive && m["r1"].Alive && m["r2"].Alive && m["r2"].ConfigDiffers
	})
	for i := range 3 {
		r := got[fmt.Sprintf("r%d", i)]
		assert.Equal(t, fmt.Sprintf("v1.%d", i), r.Version)
		assert.Equal(t, []string{"report"}, r.Jobs)
		assert.Equal(t, started.UnixMilli(), r.Started.UnixMilli())
		assert.Equal(t, beat, r.Heartbeat)
		assert.Equal(t, 3*beat+scheddefault.MaxClockSkew, r.MissingAfter)
		assert.Zero(t, r.Running)
		assert.NotEmpty(t, r.ConfigHash)
	}
	assert.Equal(t, got["r0"].ConfigHash, got["r1"].ConfigHash)
	assert.NotEqual(t, got["r0"].ConfigHash, got["r2"].ConfigHash)
	assert.False(t, got["r0"].ConfigDiffers)
	assert.False(t, got["r1"].ConfigDiffers)

	// A run in flight is counted; SetConfigHash replaces the jobs' hash.
	_, err = rs[1].Control().Trigger(ctxT(t), "report")
	require.NoError(t, err)
	<-running
	schedseam.SetConfigHash(rs[2], "custom")
	waitReplicas(t, ctl, "a run in flight and the set hash", func(m map[string]scheduler.Replica) bool {
		return m["r0"].Running+m["r1"].Running+m["r2"].Running == 1 && m["r2"].ConfigHash == "custom"
	})
	close(release)

	// r2 vanishes without Stop (its context has ended: it does not remove itself).
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, rs[2].Stop(ended))
	lastSeen := waitReplicas(t, ctl, "r2's last heartbeat", func(map[string]scheduler.Replica) bool { return true })["r2"].LastSeen
	clock.Advance(3*beat + scheddefault.MaxClockSkew + time.Millisecond)
	got = waitReplicas(t, ctl, "r2 missing", func(m map[string]scheduler.Replica) bool {
		return !m["r2"].Alive && m["r0"].Alive && m["r1"].Alive && m["r0"].LastSeen.After(lastSeen)
	})
	assert.Equal(t, lastSeen, got["r2"].LastSeen, "missing since its last heartbeat")
	assert.False(t, got["r2"].ConfigDiffers, "a missing replica's configuration is not compared")
	assert.Len(t, got, 3)
	var states map[string]int64
	var differs int64
	waitFor(t, "the gauges counting r2 missing", func() bool {
		var ok bool
		states, differs, ok = replicaGauges(t, reader)
		return ok && states["missing"] == 1
	})
	assert.Equal(t, map[string]int64{"alive": 2, "missing": 1}, states)
	assert.Zero(t, differs)

	// r1 stops: it removes itself.
	require.NoError(t, rs[1].Stop(ctxT(t)))
	waitReplicas(t, ctl, "r1 gone", func(m map[string]scheduler.Replica) bool { _, ok := m["r1"]; return !ok && len(m) == 2 })
	for _, s := range c.Servers {
		v, err := s.Client().HGet(context.Background(), layout.ReplicasKey(middleware.DefaultPrefix), "r1").Result()
		require.NoError(t, err)
		assert.Contains(t, v, `"stopped":true`, "on every node")
	}

	// An hour later, r0's heartbeat drops r2.
	clock.Advance(time.Hour)
	waitReplicas(t, ctl, "r2 pruned", func(m map[string]scheduler.Replica) bool { _, ok := m["r2"]; return !ok && m["r0"].Alive })
}

// A minority of nodes down loses no replica: each node's newest heartbeat is merged.
func TestReplicasMinorityDown(t *testing.T) {
	c := newCluster(t, 3, false)
	s := newScheduler(t, c.client(t, false), scheduler.WithReplica("r0"), schedseam.WithHeartbeat(20*time.Millisecond).(scheduler.Option))
	require.NoError(t, s.Start())
	waitReplicas(t, mustControl(t, c), "r0", func(m map[string]scheduler.Replica) bool { return m["r0"].Alive })
	require.NoError(t, c.Servers[0].Kill())
	got, err := s.Control().Replicas(ctxT(t))
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "r0", got[0].Name)
}

func mustControl(t *testing.T, c *cluster) *scheduler.Control {
	t.Helper()
	ctl, err := scheduler.NewControl(c.client(t, false))
	require.NoError(t, err)
	return ctl
}

// waitFor polls cond until it holds; it fails after waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", waitLimit, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The heartbeat's options refuse bad values with the fix.
func TestHeartbeatOptions(t *testing.T) {
	c := newCluster(t, 1, false)
	_, err := scheduler.New(c.client(t, false), schedseam.WithHeartbeat(0).(scheduler.Option))
	require.ErrorContains(t, err, "heartbeat 0s: must be positive, e.g. 10s")
}

// A node that was cut off while the replica stopped keeps its last heartbeat; the stopped
// entry on the other nodes is newer, so the replica is not listed as missing once the node is
// back.
func TestReplicasStoppedWhileANodeWasAway(t *testing.T) {
	c := newCluster(t, 3, true)
	clock := clocktest.NewFake(time.Now())
	s := newScheduler(t, c.client(t, true), scheduler.WithReplica("r0"), scheduler.WithClock(clock), schedseam.WithHeartbeat(20*time.Millisecond).(scheduler.Option))
	require.NoError(t, s.Start())
	ctl, err := scheduler.NewControl(c.client(t, false), scheduler.WithClock(clock))
	require.NoError(t, err)
	// Stop marks the replica stopped only once its own heartbeat came back (the gauges are
	// reported from then on): before that, the nodes may be out of reach.
	reader := sdkmetric.NewManualReader()
	reg, err := schedseam.RegisterGauges(s, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)
	defer func() { require.NoError(t, reg.Unregister()) }()
	waitFor(t, "r0's first heartbeat back", func() bool { _, _, ok := replicaGauges(t, reader); return ok })
	waitReplicas(t, ctl, "r0 alive", func(m map[string]scheduler.Replica) bool { return m["r0"].Alive })

	c.Proxies[0].Blackhole(true)
	_ = s.Stop(ctxT(t)) // the away node's answer is missing: an error is logged, the others have it
	c.Proxies[0].Blackhole(false)
	v, err := c.Servers[0].Client().HGet(context.Background(), layout.ReplicasKey(middleware.DefaultPrefix), "r0").Result()
	require.NoError(t, err)
	require.NotContains(t, v, "stopped", "the away node kept the heartbeat")

	clock.Advance(time.Minute)
	got, err := ctl.Replicas(ctxT(t))
	require.NoError(t, err)
	assert.Empty(t, got, "stopped, not missing")
}
