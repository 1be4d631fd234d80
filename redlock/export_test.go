package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/lockseam"
)

// WithLinger sets how long the Client's idle sender goroutines wait for more requests before
// they exit (default linger), for tests whose property does not depend on it.
func WithLinger(d time.Duration) Option {
	return func(c *config) error { c.linger = d; return nil }
}

// Releasing reports whether a release is on its way to a lock's primary node, which makes the
// Client's next contended attempts of that lock ask every node.
func (c *Client) Releasing() bool {
	c.unreleased.mu.Lock()
	defer c.unreleased.mu.Unlock()
	return len(c.unreleased.n) > 0
}

// The parts that cronlock's own packages reach through package lockseam, exported for this
// package's external tests only.
var (
	RefuseWhile   = refuseWhile
	ResolveSplits = resolveSplits
	StartBefore   = startBefore
	AskEveryNode  = askEveryNode
)

// Notifications is a subscription made with Client.Subscribe.
type Notifications = notifications

// Broadcast runs script on every node (see broadcast).
func (c *Client) Broadcast(ctx context.Context, script *redis.Script, keys []string, args ...any) ([]any, error) {
	return c.broadcast(ctx, script, keys, args...)
}

// Subscribe listens on channel on every node that can subscribe (see subscribeChannel).
func (c *Client) Subscribe(ctx context.Context, channel string) *Notifications {
	return c.subscribeChannel(ctx, channel)
}

// ReleaseKeepingDone releases the lock, keeping its primary key as a done marker for keep.
func (l *Lock) ReleaseKeepingDone(ctx context.Context, keep time.Duration) error {
	return l.release(ctx, keep)
}

// Refusal returns the key and value of the refuseWhile key that refused the failed
// acquisition first, and whether one did.
func (e *AcquireError) Refusal() (key, value string, ok bool) {
	if e.refusal == nil {
		return "", "", false
	}
	return e.refusal.key, e.refusal.value, true
}

// Attempt and Renewal are what OnAttempt and OnRenew observe.
type (
	Attempt = lockseam.Attempt
	Renewal = lockseam.Renewal
)

// OnAttempt calls f after every attempt of the acquisition (see onAttempt).
func OnAttempt(f func(Attempt)) AcquireOption { return onAttempt(f) }

// OnRenew calls f after every renewal attempt of the lease (see onRenew).
func OnRenew(f func(Renewal)) LeaseOption { return onRenew(f) }

// LeaseFrom returns the innermost lease whose context ctx is or derives from.
var LeaseFrom = leaseFrom

// Quorum returns the number of nodes that must agree.
func (c *Client) Quorum() int { return c.quorum }

// MaxTTL returns the longest TTL a lock may ask for (WithMaxTTL).
func (c *Client) MaxTTL() time.Duration { return c.cfg.maxTTL }

// NodeTimeout returns how long one request to one node may take for a lock of the TTL.
func (c *Client) NodeTimeout(ttl time.Duration) time.Duration { return c.nodeTimeout(ttl) }

// Depth returns 0 for a lock, and n for the n-th nested hold of a lock.
func (l *Lock) Depth() int { return l.depth }

// Deadline returns when the lease ends unless renewed (see deadline).
func (le *Lease) Deadline() time.Time { return le.deadline() }
