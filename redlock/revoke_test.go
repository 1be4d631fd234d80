package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/redlock"
)

// refusedHolder tries key on lc and returns the holder of the refusal.
func refusedHolder(t *testing.T, lc *redlock.Client, key string, opts ...redlock.AcquireOption) redlock.Holder {
	t.Helper()
	_, err := lc.TryAcquire(ctxT(t), key, 10*time.Second, opts...)
	ae, ok := errors.AsType[*redlock.AcquireError](err)
	require.True(t, ok, "want a refusal, got %v", err)
	require.NotNil(t, ae.Holder, "the refusal names no holder: %v", err)
	return *ae.Holder
}

// Revoke ends the holder's renewals, and so its lease, but frees nothing: the lock stays
// held until the holder releases it.
func TestRevokeEndsTheHoldersLease(t *testing.T) {
	c := newCluster(t, 3, false)
	holder, other := c.client(t), c.client(t)
	ctx := ctxT(t)
	l, err := holder.TryAcquire(ctx, "job:tick:1", 10*time.Second, redlock.Also("job:run"))
	require.NoError(t, err)
	// The acquisition returns at the quorum; its request to the last node may land later
	// (seen beside a CPU hog: 2 nodes marked of 3).
	c.waitHeldEverywhere(t, "job:run")
	lease, err := l.Lease(ctx, redlock.RenewEvery(9*time.Second)) // no renewal during the test
	require.NoError(t, err)
	defer func() { _ = lease.Close(ctx) }()

	h := refusedHolder(t, other, "job:tick:2", redlock.Also("job:run"))
	require.Equal(t, "job:run", h.Key)
	marked, err := lockseam.Revoke(other, ctx, h, "", "")
	require.NoError(t, err)
	require.Equal(t, 3, marked)

	_, err = l.Extend(ctx)
	require.ErrorIs(t, err, lockseam.ErrRevoked)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	require.NoError(t, lease.Err(), "Extend by hand does not end the lease; the lease's own renewal does")

	// Still held: the waiter waits for the release.
	refusedHolder(t, other, "job:tick:2", redlock.Also("job:run"))
	require.NoError(t, lease.Close(ctx))
	// Retrying for less than the lock's TTL: the release returns at the quorum, and the primary
	// node, asked alone first on a contended key, may apply it a moment later (seen beside a CPU
	// hog: a single TryAcquire refused by the primary alone).
	soon, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l2, err := other.Acquire(soon, "job:tick:2", 10*time.Second, redlock.Also("job:run"))
	require.NoError(t, err)
	require.NoError(t, l2.Release(ctx))
}

// A revoked lease ends at its next renewal, with a cause matching lockseam.ErrRevoked and ErrLeaseLost.
func TestRevokedLeaseIsLostAtItsNextRenewal(t *testing.T) {
	c := newCluster(t, 3, false)
	holder, other := c.client(t), c.client(t)
	ctx := ctxT(t)
	l, err := holder.TryAcquire(ctx, "k", time.Second)
	require.NoError(t, err)
	lease, err := l.Lease(ctx, redlock.RenewEvery(100*time.Millisecond))
	require.NoError(t, err)
	defer func() { _ = lease.Close(ctx) }()
	_, err = lockseam.Revoke(other, ctx, refusedHolder(t, other, "k"), "", "")
	require.NoError(t, err)
	select {
	case <-lease.Context().Done():
	case <-ctx.Done():
		t.Fatal("the revoked lease was not lost")
	}
	require.ErrorIs(t, lease.Err(), lockseam.ErrRevoked)
	require.ErrorIs(t, lease.Err(), redlock.ErrLeaseLost)
}

// Announce publishes on the channel; a done marker, or a lock released since, is not revoked;
// a Holder not from a refusal is refused.
func TestRevokeAnnounceAndNothingToRevoke(t *testing.T) {
	c := newCluster(t, 3, false)
	holder, other := c.client(t), c.client(t)
	ctx := ctxT(t)
	heard := other.Subscribe(ctx, "revoked")
	require.NotNil(t, heard)
	defer heard.Close()

	l, err := holder.TryAcquire(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	h := refusedHolder(t, other, "k")
	_, err = lockseam.Revoke(other, ctx, h, "revoked", "k")
	require.NoError(t, err)
	select {
	case <-heard.C():
	case <-ctx.Done():
		t.Fatal("no announcement")
	}

	require.NoError(t, l.ReleaseKeepingDone(ctx, time.Minute))
	require.NoError(t, holder.Close()) // waits for the release's requests to the last node
	marked, err := lockseam.Revoke(other, ctx, h, "", "")
	require.NoError(t, err)
	require.Zero(t, marked, "a released lock was revoked")
	done := refusedHolder(t, other, "k")
	require.True(t, done.Done)
	marked, err = lockseam.Revoke(other, ctx, done, "", "")
	require.NoError(t, err)
	require.Zero(t, marked, "a done marker was revoked")

	_, err = lockseam.Revoke(other, ctx, redlock.Holder{Key: "k"}, "", "")
	require.ErrorContains(t, err, "no lock value")
}
