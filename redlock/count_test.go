package redlock_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// CountAcquisitions numbers the successful acquisitions under one counter, across clients,
// whatever the quorums: refusals do not count, and a node that missed the count (or lost it)
// does not lower it.
func TestCountAcquisitions(t *testing.T) {
	c := newCluster(t, 3, false)
	settled := c.settledClients(t)
	// Requests that time out fail acquisitions the test counts on; the count does not depend on it.
	a, b := c.client(t, redlock.WithNodeTimeout(5*time.Second)), c.client(t, redlock.WithNodeTimeout(5*time.Second))
	ctx := ctxT(t)
	key := redistest.Key(t)
	counter := lockseam.CountAcquisitions(key+":count", time.Minute).(redlock.AcquireOption)
	for i, lc := range []*redlock.Client{a, b, a} {
		l, err := lc.TryAcquire(ctx, key, 10*time.Second, counter)
		require.NoError(t, err)
		assert.Equal(t, uint64(i+1), lockseam.Acquisitions(l))
		_, err = b.TryAcquire(ctx, key, 10*time.Second, counter)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "a refusal does not count")
		require.NoError(t, l.Release(ctx))
		// Release returns at a quorum: the next acquisition, contended since b's refusal, asks
		// the primary node alone first, and takes its refusal by a release still on its way
		// there as final.
		settled(lc)
		// One node loses the count each time: the next quorum still sees it.
		require.NoError(t, c.servers[i].Client().Del(ctx, key+":count").Err())
	}
	l, err := b.TryAcquire(ctx, key, 10*time.Second, counter)
	require.NoError(t, err)
	assert.Equal(t, uint64(4), lockseam.Acquisitions(l))
	ttl, err := c.servers[0].Client().PTTL(ctx, key+":count").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 10*time.Second, "the count lives for its ttl")
	l, err = b.TryAcquire(ctx, key+":other", 10*time.Second)
	require.NoError(t, err)
	assert.Zero(t, lockseam.Acquisitions(l), "not counted without the option")

	_, err = a.TryAcquire(ctx, key, 10*time.Second, lockseam.CountAcquisitions(key+":count", 0).(redlock.AcquireOption))
	require.ErrorContains(t, err, "give a positive ttl")
	_, err = a.TryAcquire(ctx, key, 10*time.Second, lockseam.CountAcquisitions(key, time.Minute).(redlock.AcquireOption))
	require.ErrorContains(t, err, "give a key of its own")
}

// A count raise whose replies are lost on two of three nodes is sent to them again while the
// lock is still valid: the acquisition succeeds as the first, instead of failing after its
// count reached one node or two — which would make the next acquisition the second, and,
// where the count bounds a tick's attempts, leave the tick run by nobody.
func TestCountRaiseIsRetriedWhileTheLockIsValid(t *testing.T) {
	c := newCluster(t, 3, false)
	ctx := ctxT(t)
	key := redistest.Key(t)
	counter := key + ":count"
	fence := scriptSHA(t, "fence.lua")
	for i, n := range c.nodes[1:] {
		var once sync.Once
		n.(*redis.Client).AddHook(onTrip(func(cmds []redis.Cmder, send func() error) error {
			lost := false
			for _, cmd := range cmds {
				if args := cmd.Args(); cmd.Name() == "evalsha" && args[1] == fence && slices.Contains(args, any(counter)) {
					once.Do(func() { lost = true })
				}
			}
			if !lost {
				return send()
			}
			if i == 0 { // node 1: the raise lands, its reply is lost
				if err := send(); err != nil {
					return err
				}
			}
			for _, cmd := range cmds {
				cmd.SetErr(redis.ErrClosed)
			}
			return redis.ErrClosed
		}))
	}
	lc := c.client(t, redlock.WithNodeTimeout(time.Second))
	l, err := lc.TryAcquire(ctx, key, 10*time.Second, lockseam.CountAcquisitions(counter, time.Minute).(redlock.AcquireOption))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), lockseam.Acquisitions(l))
	for i, s := range c.servers {
		n, err := s.Client().Get(ctx, counter).Int()
		require.NoError(t, err)
		assert.Equal(t, 1, n, "node %d's count", i)
	}
}
