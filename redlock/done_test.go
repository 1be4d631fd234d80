package redlock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// MarkDone keeps the done marker where the key is ours, absent, or an older holder's, leaves a
// newer holder alone and reports it, and releases the other keys where they are ours.
func TestMarkDoneLeavesANewerHolderAlone(t *testing.T) {
	c := newCluster(t, 5, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)
	also := key + ":also"
	l, err := lc.TryAcquire(ctx, key, 10*time.Second, redlock.Also(also))
	require.NoError(t, err)
	lower := strconv.FormatUint(l.Token()-1, 10)
	newer := strconv.FormatUint(l.Token()+1, 10)
	// Node 0 keeps our lock; nodes 1 and 2 lost it (expired); node 3 has a newer holder, and
	// node 4 a holder with a lower token there (older, or a node whose counter lagged).
	n := func(i int) *redistest.Server { return c.servers[i] }
	require.NoError(t, n(1).Client().Del(ctx, key).Err())
	require.NoError(t, n(2).Client().Del(ctx, key).Err())
	require.NoError(t, n(3).Client().HSet(ctx, key, "v", "new", "l", "new-one", "f", newer).Err())
	require.NoError(t, n(4).Client().HSet(ctx, key, "v", "other", "l", "other-one", "f", lower).Err())

	marked, holders, err := markDone(ctx, l, time.Minute)
	require.NoError(t, err, "a quorum (3 of 5) is marked")
	assert.Equal(t, 3, marked)
	require.Len(t, holders, 1)
	assert.Equal(t, "new-one", holders[0].Label)
	assert.Equal(t, l.Token()+1, holders[0].Token)
	for i, want := range []string{l.Value(), l.Value(), l.Value(), "new", "other"} {
		h, err := n(i).Client().HGetAll(ctx, key).Result()
		require.NoError(t, err)
		assert.Equal(t, want, h["v"], "node %d", i)
		if i < 3 {
			assert.Equal(t, "done", h["s"], "node %d", i)
			ttl, err := n(i).Client().PTTL(ctx, key).Result()
			require.NoError(t, err)
			assert.Greater(t, ttl, 10*time.Second, "node %d keeps the marker for a minute", i)
		}
		ex, err := n(i).Client().Exists(ctx, also).Result()
		require.NoError(t, err)
		assert.Zero(t, ex, "node %d: the Also key is released", i)
	}
	_, err = lc.TryAcquire(ctx, key, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, l.Release(ctx), redlock.ErrLockLost, "MarkDone released the lock")
}

// With newer holders on a quorum, MarkDone marks the rest and fails with ErrLockLost.
func TestMarkDoneBehindNewerHoldersOnAQuorum(t *testing.T) {
	c := newCluster(t, 3, false)
	settled := c.settledClients(t)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)
	l, err := lc.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	// It returned at a quorum: a request still on its way would take a node back after the
	// deletes below, and MarkDone would find it there, ours.
	settled(lc)
	for _, s := range c.servers {
		require.NoError(t, s.Client().Del(ctx, key).Err()) // expired everywhere
	}
	_, err = lc.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	// It expires on node 2, once its acquisition got to every node (it returned at a quorum,
	// which may not include nodes 0 and 1).
	c.waitHeldEverywhere(t, key)
	require.NoError(t, c.servers[2].Client().Del(ctx, key).Err())
	marked, newer, err := markDone(ctx, l, time.Minute)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	assert.Equal(t, 1, marked)
	// Tokens are node counters: the newer holder is above ours on at least one of its nodes.
	require.NotEmpty(t, newer)
	for _, h := range newer {
		assert.Greater(t, h.Token, l.Token())
	}
	_, _, err = markDone(ctx, l, 0)
	require.ErrorContains(t, err, "keep must be positive")
}

// markDone marks l done through the seam that the lock middleware uses.
func markDone(ctx context.Context, l *redlock.Lock, keep time.Duration) (int, []redlock.Holder, error) {
	marked, newer, err := lockseam.MarkDone(l, ctx, keep)
	holders, _ := newer.([]redlock.Holder)
	return marked, holders, err
}
