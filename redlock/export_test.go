package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
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
