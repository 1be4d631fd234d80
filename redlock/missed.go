package redlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// missedRelease is a release that did not reach its node (the request failed or timed out),
// retried in the background until the lock has expired there.
type missedRelease struct {
	keys    []string
	args    []any // of the release script
	timeout time.Duration
	until   time.Time // the lock has expired on the node by then
	group   string    // the lock's primaryGroup, when the node is its primary
}

// nodeRetries holds the releases one node missed; one goroutine retries them while there are
// some.
type nodeRetries struct {
	mu      sync.Mutex
	pending []missedRelease
	running bool
}

// Bounds of the wait between two rounds of retries of a node's missed releases.
const (
	firstRetryWait = 10 * time.Millisecond
	maxRetryWait   = time.Second
)

// release runs the release script for one hold of a lock on node. When the request fails
// for any reason but a reply of the node, the release is retried in the background (retry)
// until the lock has expired there — unless it released a nested hold, whose count could be
// lowered twice. A lock's last release on its primary node, while it is not known to have
// arrived, makes contended acquisitions of the lock's group skip primary-first (see
// unreleased).
func (c *Client) release(ctx context.Context, node int, keys []string, args []any, ttl time.Duration, retry bool, group string) (int64, error) {
	if group != "" {
		c.unreleased.add(group, 1)
	}
	n, err := releaseScript.Run(ctx, c.nodes[node], keys, args...).Int64()
	if err == nil || !retry || isNodeReply(err) {
		if group != "" {
			c.unreleased.add(group, -1)
		}
		return n, err
	}
	c.retry(node, missedRelease{keys: keys, args: args, timeout: c.nodeTimeout(ttl), until: time.Now().Add(ttl), group: group})
	return n, err
}

// isNodeReply reports whether err is an error reply of the node (a script error), which
// retrying cannot change, rather than a failure to get a reply.
func isNodeReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// retry records a missed release of node and starts the node's retrying goroutine if it is
// not running.
func (c *Client) retry(node int, m missedRelease) {
	r := &c.retries[node]
	r.mu.Lock()
	r.pending = append(r.pending, m)
	start := !r.running
	r.running = true
	r.mu.Unlock()
	if !start {
		return
	}
	if !c.start() {
		r.mu.Lock()
		r.running = false
		r.drop(c, r.pending)
		r.pending = nil
		r.mu.Unlock()
		return
	}
	go c.retryReleases(node)
}

// drop forgets missed releases: each lock expires on the node by its TTL.
func (r *nodeRetries) drop(c *Client, ms []missedRelease) {
	for _, m := range ms {
		if m.group != "" {
			c.unreleased.add(m.group, -1)
		}
	}
}

// retryReleases retries node's missed releases, in the order they were missed, with a wait
// doubling from firstRetryWait to maxRetryWait while the node fails, until none is left or
// the Client is closed. Releases whose lock has expired are dropped.
func (c *Client) retryReleases(node int) {
	defer c.inflight.Done()
	r := &c.retries[node]
	wait := firstRetryWait
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-c.bg.Done():
			r.mu.Lock()
			r.drop(c, r.pending)
			r.pending, r.running = nil, false
			r.mu.Unlock()
			return
		case <-t.C:
		}
		r.mu.Lock()
		batch := r.pending
		r.pending = nil
		r.mu.Unlock()
		failed := false
		var left []missedRelease
		for i, m := range batch {
			if !time.Now().Before(m.until) {
				r.drop(c, batch[i:i+1])
				continue
			}
			if failed {
				left = append(left, m)
				continue
			}
			ctx, cancel := context.WithTimeout(c.bg, m.timeout)
			err := releaseScript.Run(ctx, c.nodes[node], m.keys, m.args...).Err()
			cancel()
			if err != nil && !isNodeReply(err) {
				failed = true // the node is still unreachable: the others wait for the next round
				left = append(left, m)
				continue
			}
			r.drop(c, batch[i:i+1])
		}
		r.mu.Lock()
		r.pending = append(left, r.pending...)
		if len(r.pending) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		if failed {
			wait = min(2*wait, maxRetryWait)
		} else {
			wait = firstRetryWait
		}
		t.Reset(wait)
	}
}

// pendingReleases counts, by primary group, the releases of locks on their primary node that
// are not known to have arrived. While a group has some, its contended acquisitions ask every
// node in parallel instead of the primary first: the primary, still holding a lock this
// Client released, would refuse them for good.
type pendingReleases struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *pendingReleases) add(group string, d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == nil {
		p.n = make(map[string]int)
	}
	if p.n[group] += d; p.n[group] <= 0 {
		delete(p.n, group)
	}
}

func (p *pendingReleases) has(group string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[group] > 0
}
