package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cronlock/cronlock/internal/faultproxy"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// The benchmarks run against real redis-server processes on this host, so they measure the
// client's work plus loopback round trips and the servers' Lua; on a small machine the servers
// and the client share the CPUs. bench/ runs the same workloads on go-redsync side by side.

const (
	benchTTL  = 10 * time.Second
	benchHold = time.Millisecond // critical section of a contended winner
	racers    = 32
	slowDelay = 20 * time.Millisecond // added to every round trip through the slow node's proxy
)

// BenchmarkAcquireRelease measures one uncontended TryAcquire followed by Release, on 1, 3 and
// 5 nodes.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			c := newCluster(b, n, false)
			lc := c.client(b)
			ctx := context.Background()
			keys, _ := uncontendedKeys(b, ctx, lc)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				benchAcquireRelease(b, ctx, lc, keys[i%len(keys)])
				i++
			}
		})
	}
}

// uncontendedKeys returns the lock keys an uncontended benchmark cycles through, and their
// primary group: the keys share one hash tag, hence one fence counter (the default for a
// tag), which is created (and written back to every node) before it returns, so that the
// benchmark measures the steady state of a lock that is taken again and again. The shared tag
// also gives every lock the same primary node.
//
// The lock keys are not reused within a TTL because a released lock may stay behind on a node
// for its whole TTL: Release returns once a quorum confirmed, and when it reaches a node
// before the acquisition that it undoes (both were sent in parallel with the others), that
// node takes the lock after it was released. The next acquisition of that key then finds it
// held there and, if that refusal is among the first replies, takes the key for contended:
// the next attempts ask the key's primary node alone first, and if that is the node, they fail
// with ErrNotAcquired, the holder being the caller itself, until the stale lock expires. With
// an earlier version of this package, runs that reused one key hit that within a second and
// stopped on b.Fatal; stale locks still appear (bench/stale_test.go, bench/README.md).
func uncontendedKeys(b *testing.B, ctx context.Context, lc *redlock.Client) (keys []string, group string) {
	group = "{" + redistest.Key(b) + "}"
	keys = make([]string, 1<<15)
	for i := range keys {
		keys[i] = group + ":" + strconv.Itoa(i)
	}
	benchAcquireRelease(b, ctx, lc, group+":warm") // loads the scripts, creates the counter
	return keys, group
}

func benchAcquireRelease(b *testing.B, ctx context.Context, lc *redlock.Client, key string) {
	l, err := lc.TryAcquire(ctx, key, benchTTL)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAcquireSlowNode measures TryAcquire+Release on 5 nodes, each behind a fault proxy,
// with one node's round trips slowed by slowDelay: a node other than the lock's primary
// (slow=other) or the primary itself (slow=primary), against none (slow=none, the baseline).
// It reports the percentiles of the acquisition alone, where a quorum of the four fast nodes
// decides, and the median release, also decided by a quorum (the slow node's request goes on
// in the background).
func BenchmarkAcquireSlowNode(b *testing.B) {
	for _, slow := range []string{"none", "other", "primary"} {
		b.Run("slow="+slow, func(b *testing.B) {
			c := newCluster(b, 5, true)
			lc := c.client(b)
			ctx := context.Background()
			keys, group := uncontendedKeys(b, ctx, lc)
			p := primaryNode(group, len(c.proxies))
			switch slow {
			case "other":
				setRoundTripDelay(c.proxies[(p+1)%len(c.proxies)], slowDelay)
			case "primary":
				setRoundTripDelay(c.proxies[p], slowDelay)
			}
			acq := make([]time.Duration, 0, 4096)
			rel := make([]time.Duration, 0, 4096)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				key := keys[i%len(keys)]
				i++
				start := time.Now()
				l, err := lc.TryAcquire(ctx, key, benchTTL)
				acquired := time.Now()
				acq = append(acq, acquired.Sub(start))
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
				rel = append(rel, time.Since(acquired))
			}
			reportLatencies(b, acq, rel)
		})
	}
}

// primaryNode mirrors redlock's choice of the node asked first for a contended lock: FNV-1a of the key's hash tag with its braces, modulo the number of
// nodes.
func primaryNode(group string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(group))
	return int(h.Sum32() % uint32(n))
}

// setRoundTripDelay makes every round trip through p take d longer. The proxy's latency is
// one way, applied in each direction, so it is set to half of d.
func setRoundTripDelay(p *faultproxy.Proxy, d time.Duration) {
	p.SetLatency(d / 2)
}

// reportLatencies reports the p50 and p99 of the acquisitions and the p50 of the releases, in
// microseconds.
func reportLatencies(b *testing.B, acq, rel []time.Duration) {
	if len(acq) == 0 || len(rel) == 0 {
		return
	}
	at := func(d []time.Duration, q float64) float64 {
		return float64(d[int(q*float64(len(d)-1))]) / float64(time.Microsecond)
	}
	slices.Sort(acq)
	slices.Sort(rel)
	b.ReportMetric(at(acq, 0.50), "p50-µs")
	b.ReportMetric(at(acq, 0.99), "p99-µs")
	b.ReportMetric(at(rel, 0.50), "release-p50-µs")
}

// BenchmarkContendedTryLock races 32 clients, each with its own connections, for one key on
// 5 nodes, each making one attempt per TryAcquire in a tight loop. A winner holds the lock for
// benchHold, then releases it. One op is one successful acquisition; acquisitions/s is the
// throughput of the lock, and attempts/op how many tries it took. Two holders at once fail it.
func BenchmarkContendedTryLock(b *testing.B) {
	contend(b, func(ctx context.Context, lc *redlock.Client, key string, attempts *atomic.Int64) (*redlock.Lock, error) {
		attempts.Add(1)
		return lc.TryAcquire(ctx, key, benchTTL)
	})
}

// BenchmarkContendedAcquire is BenchmarkContendedTryLock with Acquire: each racer waits for
// the lock on the client's backoff schedule (every attempt counts in attempts/op).
func BenchmarkContendedAcquire(b *testing.B) {
	contend(b, func(ctx context.Context, lc *redlock.Client, key string, attempts *atomic.Int64) (*redlock.Lock, error) {
		return lc.Acquire(ctx, key, benchTTL, redlock.OnAttempt(func(redlock.Attempt) { attempts.Add(1) }))
	})
}

// contend races 32 clients for one key on 5 nodes, each taking it with take in a loop.
func contend(b *testing.B, take func(ctx context.Context, lc *redlock.Client, key string, attempts *atomic.Int64) (*redlock.Lock, error)) {
	c := newCluster(b, 5, false)
	clients := make([]*redlock.Client, racers)
	for i := range clients {
		own := &cluster{servers: c.servers}
		for _, s := range c.servers {
			own.nodes = append(own.nodes, nodeClient(b, s.Addr()))
		}
		clients[i] = own.client(b)
	}
	ctx := context.Background()
	key := redistest.Key(b)
	benchAcquireRelease(b, ctx, clients[0], key)

	var (
		holders  atomic.Int32
		overlaps atomic.Int64 // acquisitions that found another holder
		attempts atomic.Int64
		failures atomic.Int64 // errors other than ErrNotAcquired
		lastErr  atomic.Value
		stop     = make(chan struct{})
		won      = make(chan struct{})
		wg       sync.WaitGroup
	)
	for _, lc := range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := take(ctx, lc, key, &attempts)
				if err != nil {
					if !errors.Is(err, redlock.ErrNotAcquired) {
						failures.Add(1)
						lastErr.Store(err.Error())
					}
					continue
				}
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				time.Sleep(benchHold)
				holders.Add(-1)
				if err := l.Release(ctx); err != nil {
					failures.Add(1)
					lastErr.Store(err.Error())
				}
				select {
				case won <- struct{}{}:
				case <-stop:
					return
				}
			}
		})
	}
	b.ReportAllocs()
	timeout := time.NewTimer(time.Minute) // for one acquisition
	defer timeout.Stop()
	for b.Loop() {
		select {
		case <-won:
			timeout.Reset(time.Minute)
		case <-timeout.C:
			close(stop)
			wg.Wait()
			b.Fatalf("no acquisition for a minute (%d attempts, %d failures, last: %v)", attempts.Load(), failures.Load(), lastErr.Load())
		}
	}
	elapsed := b.Elapsed()
	close(stop)
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		b.Fatalf("two holders at once, %d times", n)
	}
	if n := failures.Load(); n > 0 {
		b.Logf("%d attempts failed with an error other than ErrNotAcquired; last: %v", n, lastErr.Load())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acquisitions/s")
	b.ReportMetric(float64(attempts.Load())/float64(b.N), "attempts/op")
}
