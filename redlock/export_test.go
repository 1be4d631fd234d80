package redlock

import "time"

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
