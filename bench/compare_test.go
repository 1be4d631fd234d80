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
	"hash/fnv"
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
// release, on 1, 3 and 5 nodes.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, lib := range libs {
		for _, n := range []int{1, 3, 5} {
			b.Run(fmt.Sprintf("lib=%s/nodes=%d", lib, n), func(b *testing.B) {
				lk := newLocker(b, lib, newCluster(b, n, false))
				ctx := context.Background()
				keys, _ := uncontendedKeys(b, ctx, lk)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					lockUnlock(b, ctx, lk, keys[i%len(keys)])
					i++
				}
			})
		}
	}
}

// uncontendedKeys returns the lock keys an uncontended benchmark cycles through, enough not to
// reuse one within its TTL, and prepares lk for them: cronlock uses one fence key for all of
// them, whose counter is created (and written back to every node) before it returns, so the
// benchmark measures the steady state of a lock taken again and again, and every lock has the
// same primary node. See the README for why a key is not reused at once.
func uncontendedKeys(b *testing.B, ctx context.Context, lk locker) (keys []string, fenceKey string) {
	base := redistest.Key(b)
	keys = make([]string, 1<<15)
	for i := range keys {
		keys[i] = base + ":" + strconv.Itoa(i)
	}
	fenceKey = base + ":fence"
	lk.prepare(keys, fenceKey)
	lockUnlock(b, ctx, lk, base+":warm") // loads the scripts, creates the fence counter
	return keys, fenceKey
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
// one node's round trips slowed by slowDelay: a node other than cronlock's primary node for
// the lock (slow=other) or that node (slow=primary), against none (slow=none, the baseline).
// redsync has no primary node: its two slow cases differ only by which node is slow. It
// reports the percentiles of the acquisition alone, and the median release.
func BenchmarkAcquireSlowNode(b *testing.B) {
	for _, lib := range libs {
		for _, slow := range []string{"none", "other", "primary"} {
			b.Run(fmt.Sprintf("lib=%s/slow=%s", lib, slow), func(b *testing.B) {
				c := newCluster(b, 5, true)
				lk := newLocker(b, lib, c)
				ctx := context.Background()
				keys, fenceKey := uncontendedKeys(b, ctx, lk)
				p := primaryNode(fenceKey, len(c.proxies))
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

// primaryNode mirrors cronlock's choice of the node asked first for a contended lock, which
// its Release also waits for: FNV-1a of the fence key, modulo the number of nodes.
func primaryNode(fenceKey string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(fenceKey))
	return int(h.Sum32() % uint32(n))
}

// setRoundTripDelay makes every round trip through p take d longer. The proxy's latency is
// one way, applied in each direction, so it is set to half of d.
func setRoundTripDelay(p *faultproxy.Proxy, d time.Duration) {
	p.SetLatency(d / 2)
}

// BenchmarkContendedTryLock races 32 lockers, each with its own connections, for one key on
// 5 nodes, each making one attempt per try in a tight loop. A winner holds the lock for
// benchHold, then releases it. One op is one successful acquisition: acquisitions/s is the
// lock's throughput, attempts/op how many tries it took. Two holders at once fail it.
func BenchmarkContendedTryLock(b *testing.B) {
	for _, lib := range libs {
		b.Run("lib="+lib, func(b *testing.B) {
			c := newCluster(b, 5, false)
			lockers := make([]locker, racers)
			ctx := context.Background()
			key := redistest.Key(b)
			for i := range lockers {
				lockers[i] = newLocker(b, lib, c)
				lockers[i].prepare([]string{key}, key+":fence") // the default fence key
			}
			lockUnlock(b, ctx, lockers[0], key)

			var (
				holders  atomic.Int32
				overlaps atomic.Int64 // acquisitions that found another holder
				attempts atomic.Int64
				failures atomic.Int64 // errors other than "held elsewhere"
				lastErr  atomic.Value
				stop     = make(chan struct{})
				won      = make(chan struct{})
				wg       sync.WaitGroup
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
						if holders.Add(1) != 1 {
							overlaps.Add(1)
						}
						time.Sleep(benchHold)
						holders.Add(-1)
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
		})
	}
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
