package redlock

import "time"

// WithLinger sets how long the Client's idle sender goroutines wait for more requests before
// they exit (default linger), for tests whose property does not depend on it.
func WithLinger(d time.Duration) Option {
	return func(c *config) error { c.linger = d; return nil }
}
