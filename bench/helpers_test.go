package bench

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/faultproxy"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// cluster is a set of real redis-server nodes for one benchmark, optionally each behind a
// fault proxy.
type cluster struct {
	servers []*redistest.Server
	proxies []*faultproxy.Proxy // nil unless proxied
	addrs   []string            // what clients dial: the proxies if any, else the servers
}

func newCluster(tb testing.TB, n int, proxied bool) *cluster {
	tb.Helper()
	c := &cluster{servers: redistest.StartN(tb, n, redistest.Config{})}
	for _, s := range c.servers {
		addr := s.Addr()
		if proxied {
			p := faultproxy.Start(tb, addr)
			c.proxies = append(c.proxies, p)
			addr = p.Addr()
		}
		c.addrs = append(c.addrs, addr)
	}
	return c
}

// redisClients returns fresh go-redis clients, one per node, closed at cleanup. Both
// libraries get the same options: context deadlines enforced, no hidden retries.
func (c *cluster) redisClients(tb testing.TB) []*redis.Client {
	rcs := make([]*redis.Client, len(c.addrs))
	for i, addr := range c.addrs {
		rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		tb.Cleanup(func() { _ = rc.Close() })
		rcs[i] = rc
	}
	return rcs
}

// locker is what the workloads need of either library. One locker holds at most one lock at
// a time and is used by one goroutine, so the hot loop calls through an interface without
// allocating for it.
type locker interface {
	// tryLock makes one attempt to take key for benchTTL.
	tryLock(ctx context.Context, key string) error
	// unlock releases the lock taken by the last successful tryLock.
	unlock(ctx context.Context) error
	// prepare readies the locker for the given lock keys: redsync gets a Mutex per key.
	prepare(keys []string)
	// fork returns a locker on the same client and connections, with its own held lock, for
	// another goroutine.
	fork() locker
}

// newLocker returns a locker of the named library over fresh connections to c's nodes.
func newLocker(tb testing.TB, lib string, c *cluster) locker {
	tb.Helper()
	rcs := c.redisClients(tb)
	switch lib {
	case "cronlock":
		nodes := make([]redlock.Node, len(rcs))
		for i, rc := range rcs {
			nodes[i] = rc
		}
		lc, err := redlock.New(nodes)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = lc.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := lc.EndQuarantine(ctx); err != nil {
			tb.Fatal(err)
		}
		return &cronlockLocker{c: lc}
	case "redsync":
		pools := make([]redsyncredis.Pool, len(rcs))
		for i, rc := range rcs {
			pools[i] = goredis.NewPool(rc)
		}
		return &redsyncLocker{rs: redsync.New(pools...), mutexes: map[string]*redsync.Mutex{}}
	}
	tb.Fatalf("unknown library %q", lib)
	return nil
}

type cronlockLocker struct {
	c    *redlock.Client
	held *redlock.Lock
}

func (l *cronlockLocker) tryLock(ctx context.Context, key string) error {
	lk, err := l.c.TryAcquire(ctx, key, benchTTL)
	if err != nil {
		return err
	}
	l.held = lk
	return nil
}

func (l *cronlockLocker) prepare([]string) {}

func (l *cronlockLocker) fork() locker { return &cronlockLocker{c: l.c} }

func (l *cronlockLocker) unlock(ctx context.Context) error {
	lk := l.held
	l.held = nil
	return lk.Release(ctx)
}

// redsyncLocker keeps one Mutex per key and reuses it, as a redsync user may; creating one per
// attempt would add a few allocations to redsync's side.
type redsyncLocker struct {
	rs      *redsync.Redsync
	mutexes map[string]*redsync.Mutex
	held    *redsync.Mutex
}

func (l *redsyncLocker) mutex(key string) *redsync.Mutex {
	m := l.mutexes[key]
	if m == nil {
		m = l.rs.NewMutex(key, redsync.WithExpiry(benchTTL), redsync.WithTries(1))
		l.mutexes[key] = m
	}
	return m
}

func (l *redsyncLocker) tryLock(ctx context.Context, key string) error {
	m := l.mutex(key)
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	l.held = m
	return nil
}

func (l *redsyncLocker) prepare(keys []string) {
	for _, k := range keys {
		l.mutex(k)
	}
}

func (l *redsyncLocker) fork() locker {
	return &redsyncLocker{rs: l.rs, mutexes: map[string]*redsync.Mutex{}}
}

func (l *redsyncLocker) unlock(ctx context.Context) error {
	m := l.held
	l.held = nil
	ok, err := m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock not confirmed by a quorum")
	}
	return err
}

// reportLatencies reports the p50 and p99 of the acquisitions and of the releases, in
// microseconds.
func reportLatencies(b *testing.B, acq, rel []time.Duration) {
	if len(acq) == 0 || len(rel) == 0 {
		return
	}
	b.ReportMetric(quantile(acq, 0.50), "p50-µs")
	b.ReportMetric(quantile(acq, 0.99), "p99-µs")
	b.ReportMetric(quantile(rel, 0.50), "release-p50-µs")
	b.ReportMetric(quantile(rel, 0.99), "release-p99-µs")
}

// quantile sorts d and returns its q-quantile in µs (0 for no samples).
func quantile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[int(q*float64(len(d)-1))]) / float64(time.Microsecond)
}

// mean returns d's mean in µs (0 for no samples).
func mean(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return float64(sum) / float64(len(d)) / float64(time.Microsecond)
}

func TestMain(m *testing.M) {
	// Servers shut down at the end of every benchmark: go-redis's reconnect complaints are
	// noise in the results.
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
