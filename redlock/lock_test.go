package redlock_test

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

func TestAcquireRelease(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t, redlock.WithLabel("worker-a"))
	ctx := ctxT(t)
	key := redistest.Key(t)

	l, err := lc.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, key, l.Key())
	assert.NotZero(t, l.Token())
	assert.Len(t, l.Value(), 32)
	assert.WithinDuration(t, time.Now().Add(10*time.Second), l.ValidUntil(), 2*time.Second)

	_, err = lc.TryAcquire(ctx, key, 10*time.Second, redlock.Label("worker-b"))
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var ae *redlock.AcquireError
	require.ErrorAs(t, err, &ae)
	require.NotNil(t, ae.Holder)
	assert.Equal(t, "worker-a", ae.Holder.Label)
	assert.False(t, ae.Holder.Done)
	assert.Contains(t, err.Error(), `held by "worker-a"`)

	require.NoError(t, l.Release(ctx))
	// The release returns at the quorum; the primary node, asked alone first on this contended
	// key, may apply it a moment later: retry for less than the TTL.
	soon, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l2, err := lc.Acquire(soon, key, 10*time.Second)
	require.NoError(t, err)
	assert.Greater(t, l2.Token(), l.Token())
	require.NoError(t, l2.Release(ctx))

	// A second release finds nothing of ours.
	require.ErrorIs(t, l2.Release(ctx), redlock.ErrLockLost)
}

func TestMutualExclusionUnderContention(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)

	const workers, rounds = 8, 15
	var holders, maxHolders, acquired atomic.Int32
	var lastToken atomic.Uint64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			<-start
			for range rounds {
				l, err := lc.Acquire(ctx, key, 5*time.Second)
				if !assert.NoError(t, err) {
					return
				}
				h := holders.Add(1)
				for {
					m := maxHolders.Load()
					if h <= m || maxHolders.CompareAndSwap(m, h) {
						break
					}
				}
				// Tokens of successive holders strictly increase.
				prev := lastToken.Swap(l.Token())
				assert.Greater(t, l.Token(), prev)
				acquired.Add(1)
				holders.Add(-1)
				assert.NoError(t, l.Release(ctx))
			}
		})
	}
	close(start)
	wg.Wait()
	assert.EqualValues(t, 1, maxHolders.Load(), "two holders at once")
	assert.EqualValues(t, workers*rounds, acquired.Load())
}

func TestLockExpires(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)

	l, err := lc.TryAcquire(ctx, key, 300*time.Millisecond)
	require.NoError(t, err)
	// Not released: another acquirer waits for the TTL, then gets it.
	l2, err := lc.Acquire(ctx, key, 5*time.Second)
	require.NoError(t, err)
	assert.Greater(t, l2.Token(), l.Token())
	assert.False(t, time.Now().Before(l.ValidUntil()), "acquired before the first lock's validity ended")

	// The first holder can neither extend nor release the lock it lost.
	_, err = l.Extend(ctx)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	require.ErrorIs(t, l.Release(ctx), redlock.ErrLockLost)
	_, err = lc.TryAcquire(ctx, key, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "the old holder's release freed the new holder's lock")
	require.NoError(t, l2.Release(ctx))
}

func TestExtend(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)

	l, err := lc.TryAcquire(ctx, key, 2*time.Second)
	require.NoError(t, err)
	before := l.ValidUntil()
	validity, err := l.Extend(ctx)
	require.NoError(t, err)
	assert.Greater(t, validity, time.Duration(0))
	assert.False(t, l.ValidUntil().Before(before))
	for _, s := range c.servers {
		pttl, err := s.Client().PTTL(ctx, key).Result()
		require.NoError(t, err)
		assert.Greater(t, pttl, time.Second)
	}
	require.NoError(t, l.Release(ctx))
	_, err = l.Extend(ctx)
	require.ErrorIs(t, err, redlock.ErrLockLost)
}

func TestMinorityDownStillAcquires(t *testing.T) {
	c := newCluster(t, 5, false)
	lc := c.client(t)
	ctx := ctxT(t)
	require.NoError(t, c.servers[1].Kill())
	require.NoError(t, c.servers[3].Kill())

	var a redlock.Attempt
	l, err := lc.TryAcquire(ctx, redistest.Key(t), 5*time.Second, redlock.OnAttempt(func(at redlock.Attempt) { a = at }))
	require.NoError(t, err)
	assert.Equal(t, 3, a.OK)
	require.NoError(t, l.Release(ctx))
}

func TestMajorityDownFailsWithQuorumUnavailable(t *testing.T) {
	c := newCluster(t, 5, false)
	lc := c.client(t)
	ctx := ctxT(t)
	for _, i := range []int{0, 2, 4} {
		require.NoError(t, c.servers[i].Kill())
	}
	_, err := lc.TryAcquire(ctx, redistest.Key(t), 5*time.Second)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	require.NotErrorIs(t, err, redlock.ErrNotAcquired)
	var ne *redlock.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Contains(t, []int{0, 2, 4}, ne.Node)
	assert.Contains(t, ne.Name, "127.0.0.1:")
}

// A slow minority node does not slow acquisition: the outcome is decided without its reply.
func TestSlowNodeIsNotWaitedFor(t *testing.T) {
	c := newCluster(t, 5, true)
	lc := c.client(t, redlock.WithNodeTimeout(5*time.Second))
	ctx := ctxT(t)
	c.proxies[2].SetLatency(time.Second)

	var a redlock.Attempt
	l, err := lc.TryAcquire(ctx, redistest.Key(t), 20*time.Second, redlock.OnAttempt(func(at redlock.Attempt) { a = at }))
	require.NoError(t, err)
	assert.Less(t, a.OK+a.Refused+a.Failed, 5, "waited for the slow node")
	require.NoError(t, l.Release(ctx))
}

func TestQuarantineAfterMemoryLoss(t *testing.T) {
	for _, quarantine := range []bool{true, false} {
		name := "quarantine"
		if !quarantine {
			name = "without quarantine, two holders"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 3, false)
			var opts []redlock.Option
			if !quarantine {
				opts = append(opts, redlock.WithoutQuarantine())
			}
			ctx := ctxT(t)
			key := redistest.Key(t)

			// A holds the lock on nodes 0 and 1 only (node 2 is down at that moment). Closing
			// A's client waits for its request to node 2, which would otherwise keep dialing
			// and could place the lock there once node 2 is back.
			la, lc := c.client(t, opts...), c.client(t, opts...)
			require.NoError(t, c.servers[2].Kill())
			a, err := la.TryAcquire(ctx, key, 30*time.Second, redlock.AskEveryNode())
			require.NoError(t, err)
			require.NoError(t, la.Close())
			require.NoError(t, c.servers[2].Restart())
			// Node 2 had nothing to forget: end its quarantine by hand.
			require.NoError(t, c.servers[2].Client().Set(ctx, "cronlock:boot", "0", 0).Err())
			// Node 1 restarts without persistence: it forgets A's lock.
			require.NoError(t, c.servers[1].Kill())
			require.NoError(t, c.servers[1].Restart())

			b, err := lc.TryAcquire(ctx, key, 30*time.Second, redlock.AskEveryNode())
			if !quarantine {
				// The unsafe case the quarantine exists for: B takes nodes 1 and 2.
				require.NoError(t, err)
				assert.Greater(t, b.Token(), a.Token())
				return
			}
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			var ae *redlock.AcquireError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, 1, ae.Quarantined)
			assert.Contains(t, err.Error(), "quarantine")
		})
	}
}

// A node in quarantine gets no fencing counter from another acquisition's write-back: a
// counter that exists is how the acquire script knows a node ended its quarantine, so one
// written there would end it early. Node 0 is new (no boot marker), node 2's counter is ahead
// of node 1's, so the token is written back to nodes 0 and 1.
func TestWriteBackSkipsANodeInQuarantine(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	base := "{" + redistest.Key(t) + "}"
	fence := base + ":fence"
	quarantined := c.servers[0].Client()
	require.NoError(t, quarantined.Del(ctx, layout.BootKey).Err())
	require.NoError(t, c.servers[2].Client().Set(ctx, fence, "9000000000000000", 0).Err())
	// scripts counts the script calls node 0 has served: the requests to it run on after an
	// acquisition returns at a quorum.
	scripts := func() int64 {
		stats, err := quarantined.InfoMap(ctx, "commandstats").Result()
		require.NoError(t, err)
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats["Commandstats"]["cmdstat_evalsha"], "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		return n
	}
	before := scripts()

	l, err := lc.TryAcquire(ctx, base+":a", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, uint64(9000000000000001), l.Token())
	require.Eventually(t, func() bool { return scripts() >= before+2 }, 10*time.Second, time.Millisecond,
		"node 0 answered the acquisition and the write-back")
	assert.Zero(t, quarantined.Exists(ctx, fence).Val(), "a counter written on the node in quarantine")

	l2, err := lc.TryAcquire(ctx, base+":b", 10*time.Second)
	require.NoError(t, err)
	assert.Greater(t, l2.Token(), l.Token())
	require.Eventually(t, func() bool { return scripts() >= before+3 }, 10*time.Second, time.Millisecond)
	assert.Zero(t, quarantined.Exists(ctx, base+":b").Val(), "the node in quarantine took the lock")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, l2.Release(ctx))
}

func TestQuarantineEnds(t *testing.T) {
	c := newCluster(t, 1, false)
	lc, err := redlock.New(c.nodes, redlock.WithMaxTTL(400*time.Millisecond), redlock.WithNodeTimeout(100*time.Millisecond))
	require.NoError(t, err)
	defer lc.Close()
	ctx := ctxT(t)
	key := redistest.Key(t)

	// A new node has no boot marker: it refuses locks for the max TTL.
	_, err = lc.TryAcquire(ctx, key, 300*time.Millisecond)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	l, err := lc.Acquire(ctx, key, 300*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

func TestCancelDuringRetryKeepsEveryCause(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	key := redistest.Key(t)
	held, err := lc.TryAcquire(ctxT(t), key, 10*time.Second)
	require.NoError(t, err)
	defer held.Release(ctxT(t))

	errShutdown := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(ctxT(t))
	attempts := 0
	_, err = lc.Acquire(ctx, key, 10*time.Second, redlock.OnAttempt(func(a redlock.Attempt) {
		attempts = a.Number
		if a.Number == 3 {
			cancel(errShutdown)
		}
	}))
	assert.Equal(t, 3, attempts)
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, errShutdown)
}

func TestAcquireGivesUpAfterMaxWait(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t, redlock.WithMaxWait(100*time.Millisecond))
	ctx := ctxT(t)
	key := redistest.Key(t)
	held, err := lc.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	defer held.Release(ctx)

	_, err = lc.Acquire(ctx, key, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Contains(t, err.Error(), "gave up after")
}

func TestAlsoKeysAndDoneMarker(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	// One hash tag for the keys, as the scheduler does for a job's keys: they share a fence
	// counter, a primary node and what is remembered of their contention.
	tag := "{" + redistest.Key(t) + "}"
	tick, run := tag+":tick", tag+":run"

	l, err := lc.TryAcquire(ctx, tick, 10*time.Second, redlock.Also(run), redlock.Metadata("trace-1"))
	require.NoError(t, err)
	// The run key is taken with the tick key.
	_, err = lc.TryAcquire(ctx, run, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var ae *redlock.AcquireError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, run, ae.Holder.Key)
	assert.Equal(t, "trace-1", ae.Holder.Metadata)

	// Released keeping a done marker: the run key is free, the tick key stays, marked done (for
	// longer than the wait below may take on a loaded machine: the marker's length is not
	// what is tested). Release returns at a quorum, maybe before the run key's primary node
	// had it: the run key is free once the release reached every node.
	require.NoError(t, l.ReleaseKeepingDone(ctx, time.Minute))
	var r *redlock.Lock
	require.Eventually(t, func() bool {
		r, err = lc.TryAcquire(ctx, run, 10*time.Second)
		return err == nil
	}, 5*time.Second, 5*time.Millisecond, "the run key to be free")
	require.NoError(t, r.Release(ctx))
	_, err = lc.TryAcquire(ctx, tick, 10*time.Second)
	require.ErrorAs(t, err, &ae)
	assert.True(t, ae.Holder.Done)
	assert.Equal(t, tick, ae.Holder.Key)
	assert.Contains(t, err.Error(), "done by")
}

// A node that lost its script cache (restart, SCRIPT FLUSH) gets the script sent whole
// again: the acquire after the flush works and caches the script anew.
func TestScriptCacheFlushFallsBackToEval(t *testing.T) {
	c := newCluster(t, 3, false)
	ctx := ctxT(t)
	key := redistest.Key(t)
	// Each round on a new client, closed after it: Close waits for the requests still
	// running on the node that did not decide the vote.
	round := func() {
		lc := c.client(t)
		l, err := lc.TryAcquire(ctx, key, 5*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		require.NoError(t, lc.Close())
	}
	src, err := os.ReadFile("scripts/acquire.lua")
	require.NoError(t, err)
	sha := fmt.Sprintf("%x", sha1.Sum(src))
	cached := func() []bool {
		var out []bool
		for _, s := range c.servers {
			ok, err := s.Client().ScriptExists(ctx, sha).Result()
			require.NoError(t, err)
			out = append(out, ok[0])
		}
		return out
	}

	// Primed: one acquire caches the script on every node.
	round()
	require.Equal(t, []bool{true, true, true}, cached())

	for _, s := range c.servers {
		require.NoError(t, s.Client().ScriptFlush(ctx).Err())
	}
	require.Equal(t, []bool{false, false, false}, cached())

	// The cached hash is now unknown everywhere: the acquire falls back to sending the script.
	round()
	assert.Equal(t, []bool{true, true, true}, cached())
}

func TestContendedLockAsksPrimaryFirst(t *testing.T) {
	c := newCluster(t, 5, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)

	var a redlock.Attempt
	hook := redlock.OnAttempt(func(at redlock.Attempt) { a = at })
	l, err := lc.TryAcquire(ctx, key, 5*time.Second, hook)
	require.NoError(t, err)
	assert.False(t, a.PrimaryFirst)
	// The acquisition returned at the quorum; its requests to the last nodes could land after
	// the next attempt's, which would take those nodes, and the release of that failed
	// attempt would make the attempt after it ask every node until it reached the primary.
	c.waitHeldEverywhere(t, key)
	_, err = lc.TryAcquire(ctx, key, 5*time.Second, hook)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	// Now contended: the next refusal costs one request.
	_, err = lc.TryAcquire(ctx, key, 5*time.Second, hook)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.True(t, a.PrimaryFirst)
	assert.Equal(t, 1, a.OK+a.Refused+a.Failed+a.Quarantined)
	// Release returns at the quorum, maybe before the primary node has the release: until
	// then this client asks every node, so an acquisition right after Release returned is
	// not refused by the primary for good.
	require.NoError(t, l.Release(ctx))
	// (A late yes of the refused attempts above may still sit on the primary for a moment;
	// retrying for less than the TTL tells that from a refusal for good.)
	soon, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l, err = lc.Acquire(soon, key, 5*time.Second, hook)
	require.NoError(t, err, "refused right after the release")
	require.NoError(t, l.Release(ctx))
	// Once the release is known to have reached the primary, it is asked first again.
	// (Each round's release may again return before the primary applied it; a round refused
	// by the primary alone for that reason is a round that asked it first, and counts.)
	require.Eventually(t, func() bool {
		l, err := lc.TryAcquire(ctx, key, 5*time.Second, hook)
		if err != nil {
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			return a.PrimaryFirst
		}
		require.NoError(t, l.Release(ctx))
		return a.PrimaryFirst
	}, 10*time.Second, time.Millisecond)
}

// Racers that start at the same instant, as scheduler replicas do at every tick, resolve to
// one winner: no round has two holders, and once the lock is known to be contended (after the
// first rounds, which may split the vote) every round has a winner. Each round's key is new
// but shares a hash tag with the others, as the ticks of a job do, and contention is
// remembered by hash tag.
func TestRacersAtTheSameInstant(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			c := newCluster(t, n, false)
			lcs := make([]*redlock.Client, 8)
			for i := range lcs {
				lcs[i] = c.client(t)
			}
			ctx := ctxT(t)
			const rounds = 20
			won := 0
			tag := "{" + redistest.Key(t) + "}"
			for round := range rounds {
				key := tag + ":tick:" + strconv.Itoa(round)
				locks := make(chan *redlock.Lock, len(lcs))
				start := make(chan struct{})
				var wg sync.WaitGroup
				for _, lc := range lcs {
					wg.Go(func() {
						<-start
						l, err := lc.TryAcquire(ctx, key, 5*time.Second)
						if err == nil {
							locks <- l
						}
					})
				}
				close(start)
				wg.Wait()
				close(locks)
				require.LessOrEqual(t, len(locks), 1, "two holders")
				for l := range locks {
					won++
					require.NoError(t, l.Release(ctx))
				}
			}
			assert.GreaterOrEqual(t, won, rounds-2)
		})
	}
}

// A release that overtakes its own lock's acquisition on a slow node (the acquisition was
// decided without that node) must not leave the lock there: the late acquisition's reply is
// answered with a release. Several keys, so that the slow node is the primary of some and
// not of others.
func TestReleaseCleansUpLateAcquisitions(t *testing.T) {
	c := newCluster(t, 3, true)
	lc, err := redlock.New(c.nodes, redlock.WithNodeTimeout(2*time.Second))
	require.NoError(t, err)
	ctx := ctxT(t)
	require.NoError(t, lc.EndQuarantine(ctx))
	c.proxies[2].SetLatency(150 * time.Millisecond)

	var keys []string
	for i := range 6 {
		key := fmt.Sprintf("%s:%d", redistest.Key(t), i)
		keys = append(keys, key)
		l, err := lc.TryAcquire(ctx, key, 20*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	require.NoError(t, lc.Close()) // waits for the slow node's requests and their clean-up
	for _, key := range keys {
		n, err := c.servers[2].Client().Exists(ctx, key).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "released lock %s left on the slow node", key)
	}
}

// The holder reported with a refusal is the one most refusing nodes name: when racers split
// the vote, a loser's leftover on one node does not hide the winner. (Five nodes: the outcome
// is decided at three refusals, of which the winner's four nodes give at least two.)
func TestRefusalNamesTheMajorityHolder(t *testing.T) {
	c := newCluster(t, 5, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)

	winner, err := lc.TryAcquire(ctx, key, 10*time.Second, redlock.Label("winner"), redlock.AskEveryNode())
	require.NoError(t, err)
	// A loser's leftover replaces the winner's lock on node 0 only.
	require.NoError(t, c.servers[0].Client().HSet(ctx, key, "v", "leftover", "l", "loser").Err())
	_, err = lc.TryAcquire(ctx, key, 10*time.Second, redlock.Label("late"), redlock.AskEveryNode())
	var ae *redlock.AcquireError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "winner", ae.Holder.Label)
	require.NoError(t, winner.Release(ctx))
}

// An extension that a node refuses while others do not answer has not shown the lock lost:
// it is still maybe ours on a quorum, so the error is "unavailable" (a lease then tries again
// while its validity lasts), not ErrLockLost.
func TestExtendWithOneNodeNotOursAndOneSilentIsUnavailable(t *testing.T) {
	c := newCluster(t, 3, true)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)
	l, err := lc.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	c.waitHeldEverywhere(t, key)                                  // else node 0's acquisition, still on its way, could take it again
	require.NoError(t, c.servers[0].Client().Del(ctx, key).Err()) // not ours there any more
	c.proxies[1].Blackhole(true)
	_, err = l.Extend(ctx)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	require.NotErrorIs(t, err, redlock.ErrLockLost)
	c.proxies[1].Blackhole(false)
	_, err = l.Extend(ctx)
	require.NoError(t, err, "the lock was ours on a quorum all along")
	require.NoError(t, l.Release(ctx))
}
