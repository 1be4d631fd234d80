// Package limiter bounds how many lock acquisitions cronlock's scheduler has in flight at once,
// across the Lock middleware of all its jobs (scheduler.WithLockConcurrency).
package limiter

import (
	"context"
	"fmt"
)

// Limiter bounds how many acquisitions (of ticks, and for the marking of skipped ticks) the
// Lock middlewares that share it have in flight at once. An acquisition holds its slot until
// its outcome is decided; its requests to the nodes that did not decide it (at most
// N − quorum, each bounded by the node timeout) finish afterwards, owned by the lock client.
// A burst of ticks — every job of a replica due at the same second — then queues here instead
// of in the node clients' connection pools, where requests would wait past the node timeout,
// fail as "quorum unavailable" and be tried again, feeding the burst. A slot is not held
// while a job runs or a retry waits. A Limiter is safe for concurrent use; a nil *Limiter does
// not limit.
type Limiter struct{ slots chan struct{} }

// New returns a Limiter of n slots; n must be positive.
func New(n int) (*Limiter, error) {
	if n <= 0 {
		return nil, fmt.Errorf("limiter of %d slots: must be positive, e.g. the node clients' pool size", n)
	}
	return &Limiter{slots: make(chan struct{}, n)}, nil
}

// Wait takes a slot, or returns ctx's cause when ctx ends first.
func (l *Limiter) Wait(ctx context.Context) error {
	if l == nil {
		return nil
	}
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Done gives back a slot taken by Wait.
func (l *Limiter) Done() {
	if l != nil {
		<-l.slots
	}
}
