// Package bench runs cronlock's redlock and go-redsync/redsync/v4 through the same workloads,
// against the same real redis-server processes, so that benchstat can put them side by side:
//
//	go test -run '^$' -bench . -benchmem -count 6 | tee results.txt
//	benchstat -col /lib results.txt
//
// It is a module of its own so that the main module does not depend on redsync.
package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/cronlock/cronlock/internal/faultproxy"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

const (
	benchTTL  = 10 * time.Second
	benchHold = time.Millisecond // critical section of a contended winner
	racers    = 32
	slowDelay = 20 * time.Millisecond // added to every round trip through the slow node's proxy
)

var libs = []string{"cronlock", "redsync"}

// BenchmarkAcquireRelease measures one uncontended single-attempt lock followed by its
// release, on 1, 3 and 5 nodes. Besides sec/op, a mean that a few slow pairs (a goroutine
// waiting for a CPU on a loaded machine) move far, it reports the pair's p50, p90 and p99, the
// figures cmd/pair prints.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, lib := range libs {
		for _, n := range []int{1, 3, 5} {
			b.Run(fmt.Sprintf("lib=%s/nodes=%d", lib, n), func(b *testing.B) {
				lk := newLocker(b, lib, newCluster(b, n, false))
				ctx := context.Background()
				keys := uncontendedKeys(b, ctx, lk)
				pairs := make([]time.Duration, 0, 1<<16)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					start := time.Now()
					lockUnlock(b, ctx, lk, keys[i%len(keys)])
					if len(pairs) < cap(pairs) {
						pairs = append(pairs, time.Since(start))
					}
					i++
				}
				b.ReportMetric(quantile(pairs, 0.50), "p50-µs")
				b.ReportMetric(quantile(pairs, 0.90), "p90-µs")
				b.ReportMetric(quantile(pairs, 0.99), "p99-µs")
			})
		}
	}
}

// uncontendedKeys returns the distinct lock keys an uncontended benchmark cycles through,
// enough not to reuse one within its TTL, and prepares lk for them (redsync: a Mutex per key).
// cronlock takes them with its default options, as a user locking invoice:<id> would: the keys
// have no hash tag, so they share the default fence counter, and their primary nodes differ.
// One lock is taken before, which loads the scripts and creates the counter. See the README
// for why a key is not reused at once.
func uncontendedKeys(b *testing.B, ctx context.Context, lk locker) []string {
	base := redistest.Key(b)
	keys := make([]string, 1<<15)
	for i := range keys {
		keys[i] = base + ":" + strconv.Itoa(i)
	}
	lk.prepare(keys)
	lockUnlock(b, ctx, lk, base+":warm")
	return keys
}

func lockUnlock(b *testing.B, ctx context.Context, lk locker, key string) {
	if err := lk.tryLock(ctx, key); err != nil {
		b.Fatal(err)
	}
	if err := lk.unlock(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAcquireSlowNode measures lock+unlock on 5 nodes, each behind a fault proxy, with
// the last node's round trips slowed by slowDelay (slow=one) or none (slow=none, the
// baseline). The keys are distinct, so the slow node is cronlock's primary node of some of
// them. It reports the p50 and p99 of the acquisition alone and of the release alone.
func BenchmarkAcquireSlowNode(b *testing.B) {
	for _, lib := range libs {
		for _, slow := range []string{"none", "one"} {
			b.Run(fmt.Sprintf("lib=%s/slow=%s", lib, slow), func(b *testing.B) {
				c := newCluster(b, 5, true)
				lk := newLocker(b, lib, c)
				ctx := context.Background()
				keys := uncontendedKeys(b, ctx, lk)
				if slow == "one" {
					setRoundTripDelay(c.proxies[len(c.proxies)-1], slowDelay)
				}
				acq := make([]time.Duration, 0, 4096)
				rel := make([]time.Duration, 0, 4096)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					key := keys[i%len(keys)]
					i++
					start := time.Now()
					err := lk.tryLock(ctx, key)
					acquired := time.Now()
					acq = append(acq, acquired.Sub(start))
					if err != nil {
						b.Fatal(err)
					}
					if err := lk.unlock(ctx); err != nil {
						b.Fatal(err)
					}
					rel = append(rel, time.Since(acquired))
				}
				reportLatencies(b, acq, rel)
			})
		}
	}
}

// BenchmarkParallelDistinct runs 32 goroutines that share one locker's connections (one
// cronlock Client, one redsync Redsync), each locking and unlocking its own distinct keys,
// on 1, 3 and 5 nodes. One op is one lock+unlock pair; pairs/s is the throughput.
func BenchmarkParallelDistinct(b *testing.B) {
	for _, lib := range libs {
		for _, n := range []int{1, 3, 5} {
			b.Run(fmt.Sprintf("lib=%s/nodes=%d", lib, n), func(b *testing.B) {
				lk := newLocker(b, lib, newCluster(b, n, false))
				ctx := context.Background()
				base := redistest.Key(b)
				lockUnlock(b, ctx, lk, base+":warm")
				var worker atomic.Int64
				b.SetParallelism(max(1, racers/runtime.GOMAXPROCS(0)))
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					own := lk.fork()
					prefix := base + ":" + strconv.FormatInt(worker.Add(1), 10) + ":"
					for i := 0; pb.Next(); i++ {
						key := prefix + strconv.Itoa(i)
						own.prepare([]string{key})
						if err := own.tryLock(ctx, key); err != nil {
							b.Error(err)
							return
						}
						if err := own.unlock(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
			})
		}
	}
}

// setRoundTripDelay makes every round trip through p take d longer. The proxy's latency is
// one way, applied in each direction, so it is set to half of d.
func setRoundTripDelay(p *faultproxy.Proxy, d time.Duration) {
	p.SetLatency(d / 2)
}

// BenchmarkContendedTryLock races 32 lockers, each with its own connections, for one key on
// 1, 3 and 5 nodes, each making one attempt per try in a tight loop. A winner holds the lock for
// benchHold, then releases it. One op is one successful acquisition: acquisitions/s is the
// lock's throughput, attempts/op how many tries it took. Two holders at once fail it.
func BenchmarkContendedTryLock(b *testing.B) {
	for _, lib := range libs {
		for _, n := range []int{1, 3, 5} {
			b.Run(fmt.Sprintf("lib=%s/nodes=%d", lib, n), func(b *testing.B) {
				contend(b, lib, n)
			})
		}
	}
}

// contend is one BenchmarkContendedTryLock run: lib's 32 racers on n nodes.
func contend(b *testing.B, lib string, n int) {
	c := newCluster(b, n, false)
	lockers := make([]locker, racers)
	ctx := context.Background()
	key := redistest.Key(b)
	for i := range lockers {
		lockers[i] = newLocker(b, lib, c)
		lockers[i].prepare([]string{key})
	}
	lockUnlock(b, ctx, lockers[0], key)

	var (
		holders  atomic.Int32
		overlaps atomic.Int64 // acquisitions that found another holder
		attempts atomic.Int64
		failures atomic.Int64 // errors other than "held elsewhere"
		lastErr  atomic.Value
		// The cycle of one acquisition, for its breakdown (their means add up to sec/op): the
		// winner's hold as slept, and the handoff, from its release call to the next racer's
		// successful tryLock.
		releasing       atomic.Int64 // Unix ns of the last release call, 0 once a winner took it
		cycle           sync.Mutex
		holds, handoffs []time.Duration
		stop            = make(chan struct{})
		won             = make(chan struct{})
		wg              sync.WaitGroup
	)
	for _, lk := range lockers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				attempts.Add(1)
				if err := lk.tryLock(ctx, key); err != nil {
					if !heldElsewhere(err) {
						failures.Add(1)
						lastErr.Store(err.Error())
					}
					continue
				}
				at := time.Now()
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				time.Sleep(benchHold)
				hold := time.Since(at)
				holders.Add(-1)
				cycle.Lock()
				holds = append(holds, hold)
				if r := releasing.Swap(0); r != 0 {
					handoffs = append(handoffs, at.Sub(time.Unix(0, r)))
				}
				cycle.Unlock()
				releasing.Store(time.Now().UnixNano())
				if err := lk.unlock(ctx); err != nil {
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
		b.Logf("%d attempts failed with another error than a held lock; last: %v", n, lastErr.Load())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acquisitions/s")
	b.ReportMetric(float64(attempts.Load())/float64(b.N), "attempts/op")
	b.ReportMetric(mean(holds), "hold-µs")
	b.ReportMetric(mean(handoffs), "handoff-µs")
}

// heldElsewhere reports whether a failed attempt lost to another holder (for redsync, a split
// vote is that too), rather than failing on a node error.
func heldElsewhere(err error) bool {
	if errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redsync.ErrFailed) {
		return true
	}
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	return errors.As(err, &taken) || errors.As(err, &nodeTaken)
}
