package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/locktest"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

const clusterPeriod = 200 * time.Millisecond

// jobOnMember returns the name of a job (named after prefix) whose keys are in a slot that
// member m of cluster c serves.
func jobOnMember(ctx context.Context, t *testing.T, c *redistest.Cluster, m int, prefix string) string {
	t.Helper()
	for n := 0; ; n++ {
		name := fmt.Sprintf("%s%d", prefix, n)
		on, err := c.MemberOf(ctx, layout.RunKey("cronlock", name))
		require.NoError(t, err)
		if on == m {
			return name
		}
	}
}

// Three Redis Clusters of three primaries stand as the three lock nodes of three replicas,
// each with its own connections, running three jobs every 200ms. Midway one primary of one
// Cluster is killed and restarted empty: the slots it serves are in quarantine on that lock
// node (a job there is refused with the quarantine reason, a job on another member is not),
// and every tick runs exactly once throughout, from a margin after each job's first run.
func TestExactlyOnceOnClusterNodes(t *testing.T) {
	clusters := redistest.StartClusters(t, 3, 3, redistest.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lost := jobOnMember(ctx, t, clusters[0], 1, "lost")
	kept := jobOnMember(ctx, t, clusters[0], 2, "kept")
	jobs := []string{lost, kept, jobOnMember(ctx, t, clusters[0], 0, "other")}

	newClient := func(clusters ...*redistest.Cluster) *redlock.Client {
		lc, err := redlock.New(locktest.ClusterNodes(t, clusters...), redlock.WithNodeTimeout(200*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = lc.Close() })
		return lc
	}
	require.NoError(t, newClient(clusters...).EndQuarantine(ctx))

	led := newLedger()
	var scheds []*scheduler.Scheduler
	var replicas []string
	for r := range 3 {
		name := fmt.Sprintf("r%d", r)
		replicas = append(replicas, name)
		s := newScheduler(t, newClient(clusters...), scheduler.WithReplica(name), scheduler.WithMiddleware(led.observe()), scheduler.WithLogger(led.logger(name)))
		for _, name := range jobs {
			require.NoError(t, s.Add(job.Job{Name: name, Spec: fmt.Sprintf("@every %v", clusterPeriod), Options: job.Options{LockTTL: 2 * time.Second},
				Handler: led.handler(func(ctx context.Context) error { return sleepCtx(ctx, 5*time.Millisecond) })}))
		}
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		require.NoError(t, s.Start())
	}
	// The check begins a margin after every job has run once: before, each replica's Cluster
	// clients load the slot maps and dial the members, which on a loaded machine can take
	// longer than a 200ms tick's window.
	var from time.Time
	for _, name := range jobs {
		if e := led.waitEvent(t, name+"'s first run", func(e event) bool { return e.Job == name }); e.Tick.After(from) {
			from = e.Tick
		}
	}
	from = from.Add(skewMargin)
	led.waitEvent(t, "ticks before the restart", func(e event) bool { return e.Tick.After(from.Add(5 * clusterPeriod)) })

	require.NoError(t, clusters[0].Restart(1))
	alone := newClient(clusters[0]) // fresh connections to the restarted cluster, alone
	_, err := alone.TryAcquire(ctx, "{cronlock:"+lost+"}:probe", 5*time.Second)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	ae, ok := errors.AsType[*redlock.AcquireError](err)
	require.True(t, ok)
	assert.Equal(t, 1, ae.Quarantined, "the restarted member's slots are in quarantine: %v", err)
	l, err := alone.TryAcquire(ctx, "{cronlock:"+kept+"}:probe", 5*time.Second)
	require.NoError(t, err, "another member's slots are not in quarantine")
	require.NoError(t, l.Release(ctx))

	// Run on until enough ticks have passed, some of them while the slots are in quarantine.
	to := from.Add(skewTicks * clusterPeriod)
	if now := time.Now(); now.After(to) {
		to = now
	}
	led.waitEvent(t, "the last tick", func(e event) bool { return e.Tick.After(to.Add(skewMargin)) })
	for _, s := range scheds {
		require.NoError(t, s.Stop(ctx))
	}

	_, events := led.snapshot()
	for _, name := range jobs {
		var runs []tickRun
		for _, e := range events {
			if e.Job == name {
				require.NoError(t, e.Err, "run %v", e)
				runs = append(runs, tickRun{Tick: e.Tick, Token: e.Token, Start: e.Start})
			}
		}
		t.Run(name, func(t *testing.T) {
			checkExactlyOnce(t, runs, led.decisions(name, clusterPeriod, replicas...), from, to, clusterPeriod)
		})
	}
}
