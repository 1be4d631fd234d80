package redlock_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// roundTrips counts what a go-redis client sends: round trips (a command alone or a
// pipeline), script calls among them, and the most round trips in flight at once.
type roundTrips struct {
	trips, scripts, now, most atomic.Int32
}

// onTrip is a go-redis hook that passes every round trip (a command alone or a pipeline) to
// a func, which sends it by calling send.
type onTrip func(cmds []redis.Cmder, send func() error) error

func (f onTrip) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f onTrip) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return f([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (f onTrip) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return f(cmds, func() error { return next(ctx, cmds) })
	}
}

func (r *roundTrips) hook(cmds []redis.Cmder, send func() error) error {
	defer r.trip(cmds)()
	return send()
}

// trip counts one round trip of cmds as started, and returns what counts it as done. Only
// round trips with script calls count as in flight: a new connection's handshake (HELLO) goes
// through the hooks too, inside the round trip that opened it.
func (r *roundTrips) trip(cmds []redis.Cmder) func() {
	r.trips.Add(1)
	scripts := int32(0)
	for _, cmd := range cmds {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			scripts++
		}
	}
	if scripts == 0 {
		return func() {}
	}
	r.scripts.Add(scripts)
	n := r.now.Add(1)
	for m := r.most.Load(); n > m && !r.most.CompareAndSwap(m, n); m = r.most.Load() {
	}
	return func() { r.now.Add(-1) }
}

func (r *roundTrips) reset() {
	r.trips.Store(0)
	r.scripts.Store(0)
	r.most.Store(0)
}

// lockAll takes and releases n distinct locks from n goroutines started at once, and
// requires each to succeed.
func lockAll(t *testing.T, lc *redlock.Client, base string, n int) {
	t.Helper()
	ctx := ctxT(t)
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			l, err := lc.TryAcquire(ctx, base+":"+strconv.Itoa(i), 10*time.Second)
			if err == nil {
				err = l.Release(ctx)
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// Concurrent requests to a node share round trips: while the first batches are on their way
// to a node 30ms away, the requests that come meanwhile queue, and go out together as one
// pipeline. A node never has more than four batches in flight (nor holds more connections),
// however many requests wait for it. Then a node that lost its script cache gets the scripts
// of a whole pipeline sent again as EVAL.
func TestConcurrentRequestsShareRoundTrips(t *testing.T) {
	const locks = 64
	c := newCluster(t, 3, true)
	counters := make([]*roundTrips, len(c.nodes))
	for i, n := range c.nodes {
		counters[i] = &roundTrips{}
		n.(*redis.Client).AddHook(onTrip(counters[i].hook))
	}
	lc := c.client(t, redlock.WithNodeTimeout(2*time.Second))
	for _, p := range c.proxies {
		setRoundTripDelay(p, 30*time.Millisecond)
	}
	base := redistest.Key(t)
	for _, r := range counters {
		r.reset()
	}
	lockAll(t, lc, base, locks)
	for i, r := range counters {
		// Each lock asks every node once to acquire and once to release (a node whose
		// acquisition reply was still in flight is released by that reply instead).
		assert.GreaterOrEqual(t, r.scripts.Load(), int32(locks), "node %d: script calls", i)
		assert.LessOrEqual(t, r.trips.Load(), int32(locks/2), "node %d: round trips for %d script calls", i, r.scripts.Load())
		assert.LessOrEqual(t, r.most.Load(), int32(4), "node %d: round trips in flight at once", i)
	}

	for _, s := range c.servers {
		require.NoError(t, s.Client().ScriptFlush(ctxT(t)).Err())
	}
	lockAll(t, lc, base+":flushed", locks)
}

// senders records which goroutines send a node's script calls.
type senders struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (s *senders) hook(_ []redis.Cmder, send func() error) error {
	s.saw()
	return send()
}

// saw records the calling goroutine's id, from the first line of its stack.
func (s *senders) saw() {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	s.mu.Lock()
	s.ids[id] = true
	s.mu.Unlock()
}

// sendersRunning counts the goroutines of links, from a goroutine profile.
func sendersRunning(t *testing.T) int {
	var b strings.Builder
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&b, 1))
	return strings.Count(b.String(), "redlock.(*Client).send+")
}

// A busy Client reuses the goroutines that send to its nodes: 200 locks taken and released
// one after the other are sent by at most four goroutines per node (one would do; a new
// goroutine per request, and per node, would be 400). Once the Client is idle they exit.
func TestSendersAreReusedAndExitWhenIdle(t *testing.T) {
	c := newCluster(t, 3, false)
	seen := make([]*senders, len(c.nodes))
	for i, n := range c.nodes {
		seen[i] = &senders{ids: map[string]bool{}}
		n.(*redis.Client).AddHook(onTrip(seen[i].hook))
	}
	// Senders that outlive the gaps between requests, however long a loaded machine makes
	// them: reuse is what is tested, not how long an idle sender waits.
	lc := c.client(t, redlock.WithLinger(time.Hour))
	ctx := ctxT(t)
	base := redistest.Key(t)
	for i := range 200 {
		l, err := lc.TryAcquire(ctx, base+":"+strconv.Itoa(i), 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	for i, s := range seen {
		s.mu.Lock()
		assert.LessOrEqual(t, len(s.ids), 4, "node %d: goroutines that sent its 400 requests", i)
		s.mu.Unlock()
	}
	require.NoError(t, lc.Close())
	// Close waits for each sender's last step (its deferred Done); the goroutine is gone a
	// moment later (one was still on its way out beside a CPU hog), as goleak allows for.
	require.Eventually(t, func() bool { return sendersRunning(t) == 0 }, 10*time.Second, time.Millisecond, "senders running after Close")

	// With the default linger, idle senders exit by themselves.
	lc = c.client(t)
	l, err := lc.TryAcquire(ctx, base, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.Eventually(t, func() bool { return sendersRunning(t) == 0 }, 10*time.Second, 10*time.Millisecond,
		"senders still running long after the last request")
}

// releaseFirst makes one node run a lock's release before its acquisition: the acquire script
// waits before it is sent until the release script's reply came; with replyLast, the release's
// reply is then held back until the acquisition's reply came (and a moment more), so that the
// Client sees the acquisition's reply first.
type releaseFirst struct {
	acquire, release   string // script SHA-1s
	replyLast          bool
	acquiring          chan struct{} // the acquisition is waiting
	released, acquired chan struct{}
	once               sync.Once
}

func newReleaseFirst(t *testing.T, replyLast bool) *releaseFirst {
	return &releaseFirst{acquire: scriptSHA(t, "acquire.lua"), release: scriptSHA(t, "release.lua"), replyLast: replyLast,
		acquiring: make(chan struct{}, 1), released: make(chan struct{}), acquired: make(chan struct{})}
}

func (h *releaseFirst) order(cmds []redis.Cmder, send func() error) error {
	var script string
	for _, cmd := range cmds {
		if args := cmd.Args(); len(args) > 1 && args[0] == "evalsha" {
			script = fmt.Sprint(args[1])
		}
	}
	switch script {
	case h.acquire:
		h.acquiring <- struct{}{}
		<-h.released
		defer close(h.acquired)
	case h.release:
		defer func() {
			h.once.Do(func() { close(h.released) })
			if h.replyLast {
				<-h.acquired
				time.Sleep(50 * time.Millisecond) // for the acquisition's reply to be handled
			}
		}()
	}
	return send()
}

func scriptSHA(t *testing.T, name string) string {
	src, err := os.ReadFile("scripts/" + name)
	require.NoError(t, err)
	return fmt.Sprintf("%x", sha1.Sum(src))
}

// releaseBeforeAcquisition acquires a lock whose acquisition reaches node 2 only after the
// lock's release (keeping a done marker for keep, when positive) did, and closes the Client, which waits for node 2's
// requests and what they start. replyLast says whether the Client sees the release's reply
// from node 2 after the acquisition's. It returns the cluster and the lock's key.
func releaseBeforeAcquisition(t *testing.T, replyLast bool, keep time.Duration) (*cluster, string) {
	c := newCluster(t, 3, false)
	lc := c.client(t, redlock.WithNodeTimeout(2*time.Second))
	ctx := ctxT(t)
	key := redistest.Key(t)
	// The nodes cache the scripts first: the hook orders EVALSHAs.
	l, err := lc.TryAcquire(ctx, key+":scripts", 20*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	hook := newReleaseFirst(t, replyLast)
	c.nodes[2].(*redis.Client).AddHook(onTrip(hook.order))
	l, err = lc.TryAcquire(ctx, key, 20*time.Second)
	require.NoError(t, err)
	<-hook.acquiring // node 2's acquisition was sent on its own, and waits
	require.NoError(t, l.ReleaseKeepingDone(ctx, keep))
	require.NoError(t, lc.Close())
	return c, key
}

// A node whose acquisition is still on its way when the lock is released may get the release
// first: the release finds nothing, the acquisition then takes the lock, and the node is
// released again — whichever of the two replies the Client sees second. Nothing is left.
func TestReleaseBeforeItsAcquisitionIsMadeAgain(t *testing.T) {
	for _, replyLast := range []bool{false, true} {
		t.Run(fmt.Sprint("release reply last=", replyLast), func(t *testing.T) {
			c, key := releaseBeforeAcquisition(t, replyLast, 0)
			n, err := c.servers[2].Client().Exists(ctxT(t), key).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "the released lock is left on the node whose release came first")
		})
	}
}

// The same with a release that keeps the key as done: the node whose acquisition came after
// its release ends up marked done too, not deleted, whichever reply the Client sees second.
func TestReleaseBeforeItsAcquisitionKeepsTheDoneMarker(t *testing.T) {
	for _, replyLast := range []bool{false, true} {
		t.Run(fmt.Sprint("release reply last=", replyLast), func(t *testing.T) {
			c, key := releaseBeforeAcquisition(t, replyLast, time.Minute)
			ctx := ctxT(t)
			for i, s := range c.servers {
				h, err := s.Client().HGetAll(ctx, key).Result()
				require.NoError(t, err)
				assert.Equal(t, "done", h["s"], "node %d keeps the done marker", i)
				ttl, err := s.Client().PTTL(ctx, key).Result()
				require.NoError(t, err)
				assert.Greater(t, ttl, 20*time.Second, "node %d keeps it for the time asked", i)
			}
		})
	}
}
