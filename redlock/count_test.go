package redlock_test

import (
	"testing"
	"time"

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
