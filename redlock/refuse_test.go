package redlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

var (
	setScript = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1])`)
	delScript = redis.NewScript(`return redis.call('DEL', KEYS[1])`)
)

// A RefuseWhile key on a quorum refuses the lock, with its value, even with a minority of the
// nodes down, and the lock is free again once the key is gone.
func TestRefuseWhileKeyOnQuorum(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)
	flag := key + ":paused"

	_, err := lc.Broadcast(ctx, setScript, []string{flag}, "maintenance")
	require.NoError(t, err)
	require.NoError(t, c.servers[0].Kill()) // a minority down: the flag still holds

	_, err = lc.TryAcquire(ctx, key, 5*time.Second, redlock.RefuseWhile(flag), redlock.ResolveSplits(3))
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	ae, ok := errors.AsType[*redlock.AcquireError](err)
	require.True(t, ok)
	refusing, value, ok := ae.Refusal()
	require.True(t, ok, "%v", err)
	assert.Equal(t, []string{flag, "maintenance"}, []string{refusing, value})
	assert.Contains(t, err.Error(), "maintenance")

	// Without the option, the same flag is just a key.
	l, err := lc.TryAcquire(ctx, key, 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))

	replies, err := lc.Broadcast(ctx, delScript, []string{flag})
	require.NoError(t, err, "two of three nodes answer: a quorum")
	assert.Nil(t, replies[0], "the dead node has no reply")
	assert.Equal(t, int64(1), replies[1])
	l, err = lc.TryAcquire(ctx, key, 5*time.Second, redlock.RefuseWhile(flag))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

// A RefuseWhile key on one node of three refuses nothing on its own: the other two make a
// quorum.
func TestRefuseWhileKeyOnMinority(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)
	flag := key + ":paused"
	require.NoError(t, c.servers[1].Client().Set(ctx, flag, "x", 0).Err())
	var a redlock.Attempt
	l, err := lc.TryAcquire(ctx, key, 5*time.Second, redlock.RefuseWhile(flag), redlock.OnAttempt(func(at redlock.Attempt) { a = at }))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	assert.Equal(t, 2, a.OK, "attempt %+v", a)
}

func TestRefuseWhileRefusesBadKeys(t *testing.T) {
	c := newCluster(t, 1, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)
	_, err := lc.TryAcquire(ctx, key, time.Second, redlock.RefuseWhile(""))
	require.ErrorContains(t, err, "RefuseWhile key is empty")
	_, err = lc.TryAcquire(ctx, key, time.Second, redlock.RefuseWhile(key))
	require.ErrorContains(t, err, "is also a key of lock")
}

// Broadcast fails with ErrQuorumUnavailable when a majority is down, and still returns the
// replies of the nodes that answered.
func TestBroadcastWithoutQuorum(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	require.NoError(t, c.servers[0].Kill())
	require.NoError(t, c.servers[2].Kill())
	replies, err := lc.Broadcast(ctx, setScript, []string{redistest.Key(t)}, "v")
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	var ne *redlock.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "OK", replies[1])
}

// Subscribe relays a message published on any node, and its nil value (no node can subscribe)
// is harmless.
func TestSubscribeRelaysMessages(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	channel := redistest.Key(t) + ":asked"
	n := lc.Subscribe(ctx, channel)
	require.NotNil(t, n)
	defer n.Close()
	publish := redis.NewScript(`return redis.call('PUBLISH', KEYS[1], ARGV[1])`)
	_, err := lc.Broadcast(ctx, publish, []string{channel}, "hello")
	require.NoError(t, err)
	select {
	case <-n.C():
	case <-ctx.Done():
		t.Fatal("no message relayed")
	}
	var none *redlock.Notifications
	assert.Nil(t, none.C())
	none.Close()
}
