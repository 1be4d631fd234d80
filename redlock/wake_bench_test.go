package redlock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// BenchmarkHandOff measures how fast a contended lock moves from one holder to the next: 8
// waiters take turns on one key, each holding it for 2ms (so that the others are waiting, not
// still busy with their last turn). For each turn it reports, at p50 and p99, the time from
// the holder's Release returning to the next holder's Acquire returning, and the p50 in round
// trips of one script call to one node (rtt-µs, measured on the same nodes in the same run).
// Compare wake=false (backoff only) with wake=true, on local nodes (lat=0) and behind proxies
// that add 250µs each way (lat=250µs), where the network rather than this host's CPU sets the
// round trip.
func BenchmarkHandOff(b *testing.B) {
	for _, lat := range []time.Duration{0, 250 * time.Microsecond} {
		for _, wake := range []bool{false, true} {
			b.Run(fmt.Sprintf("lat=%v/wake=%v", lat, wake), func(b *testing.B) {
				benchHandOff(b, lat, wake)
			})
		}
	}
}

func benchHandOff(b *testing.B, lat time.Duration, wake bool) {
	c := newCluster(b, 3, lat > 0)
	for _, p := range c.proxies {
		p.SetLatency(lat)
	}
	ctx := context.Background()
	key := redistest.Key(b)
	var opts []redlock.AcquireOption
	if wake {
		opts = append(opts, redlock.WakeOnRelease())
	}
	rtt := medianRTT(b, c)

	// Turns are strictly sequential (one holder at a time), so turn k's times are written by
	// its holder alone.
	var (
		turn     atomic.Int64
		acquired = make([]time.Time, b.N+8)
		released = make([]time.Time, b.N+8)
		wg       sync.WaitGroup
	)
	turn.Store(-1)
	b.ResetTimer()
	for range 8 {
		lc := c.client(b)
		wg.Go(func() {
			for {
				l, err := lc.Acquire(ctx, key, 10*time.Second, opts...)
				if err != nil {
					b.Error(err)
					return
				}
				k := turn.Add(1)
				acquired[k] = time.Now()
				done := k >= int64(b.N)-1
				if !done {
					time.Sleep(2 * time.Millisecond) // the critical section
				}
				err = l.Release(ctx)
				released[k] = time.Now()
				if err != nil {
					b.Error(err)
				}
				if done {
					return
				}
			}
		})
	}
	wg.Wait() // every waiter ends at its first turn past the last one
	b.StopTimer()
	var handoffs []time.Duration
	for k := 1; k < b.N; k++ {
		handoffs = append(handoffs, max(acquired[k].Sub(released[k-1]), 0))
	}
	if len(handoffs) == 0 {
		return
	}
	slices.Sort(handoffs)
	p50, p99 := handoffs[len(handoffs)/2], handoffs[len(handoffs)*99/100]
	b.ReportMetric(float64(p50.Microseconds()), "handoff-p50-µs")
	b.ReportMetric(float64(p99.Microseconds()), "handoff-p99-µs")
	b.ReportMetric(float64(rtt.Microseconds()), "rtt-µs")
	b.ReportMetric(float64(p50)/float64(rtt), "handoff-p50-rtts")
}

// medianRTT is the median round trip of one script call to one node of c, through its proxy
// if it has one.
func medianRTT(b *testing.B, c *cluster) time.Duration {
	b.Helper()
	ctx := context.Background()
	samples := make([]time.Duration, 200)
	for i := range samples {
		start := time.Now()
		if err := c.nodes[0].Eval(ctx, "return 1", nil).Err(); err != nil {
			b.Fatal(err)
		}
		samples[i] = time.Since(start)
	}
	slices.Sort(samples)
	return samples[len(samples)/2]
}
